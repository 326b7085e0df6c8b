package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"golang.org/x/net/netutil"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/policy"
)

// The agent port's bounds come from the policy (server.max_connections,
// read_timeout, write_timeout, idle_timeout). The admin port has its own
// listener and its own fixed bounds below, so a saturated agent port never
// takes /metrics, /healthz or /readyz with it.
//
// There is no http.Server WriteTimeout on the agent port: it runs from the
// end of the request headers, so it would have to outlast the longest tool
// call (timeouts change on reload), and when it passed during a call the
// envelope of a call that did its side effect would be silently lost.
// Instead each write of an answer is bounded (boundedHandler), which cuts
// a client that stops reading and never a call in progress.

// Admin port bounds: a scrape, a probe or a reload is small and quick; a
// reload may wait for the policy files to settle (config.SettleTimeout).
const (
	adminMaxConnections = 64
	adminReadTimeout    = 10 * time.Second
	adminWriteTimeout   = config.SettleTimeout + 30*time.Second
	adminIdleTimeout    = 60 * time.Second
	maxHeaderBytes      = 64 << 10
)

// newAgentServer builds the agent port's server for handler with the
// policy's bounds.
func newAgentServer(handler http.Handler, s policy.Server, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           boundedHandler{next: handler, readTimeout: s.ReadTimeout, writeTimeout: s.WriteTimeout},
		ReadHeaderTimeout: s.ReadTimeout,
		IdleTimeout:       s.IdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// newAdminServer builds the admin port's server for handler.
func newAdminServer(handler http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: adminReadTimeout,
		ReadTimeout:       adminReadTimeout,
		WriteTimeout:      adminWriteTimeout,
		IdleTimeout:       adminIdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// listenLimited listens on addr and accepts at most n connections at
// once; further ones wait in the kernel's accept queue until one closes.
func listenLimited(addr string, n int) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return netutil.LimitListener(ln, n), nil
}

// listenAdmin opens the admin listener with its own connection bound.
func listenAdmin(addr string) (net.Listener, error) {
	ln, err := listenLimited(addr, adminMaxConnections)
	if err != nil {
		return nil, fmt.Errorf("admin listener: %w", err)
	}
	return ln, nil
}

// boundedHandler bounds the time an agent request may take to arrive and
// its answer to leave, but not the call in between:
//
//   - The body must arrive within readTimeout of the handler's start (the
//     headers have their own ReadHeaderTimeout). A body still incomplete
//     then fails to read: the call never runs on part of it (bad_args,
//     connection closed). Once the body is complete the deadline is
//     lifted, since net/http keeps reading the connection to notice a
//     client that goes away, and a deadline passing there would cancel
//     the call.
//   - Each write of the answer must finish within writeTimeout, so a
//     client that stops reading cannot hold a connection (and a slot of
//     max_connections) forever.
type boundedHandler struct {
	next                      http.Handler
	readTimeout, writeTimeout time.Duration
}

// requestBounds is one request's bounds, in one allocation.
type requestBounds struct {
	rc   http.ResponseController
	w    boundedWriter
	body deadlineBody
}

func (b boundedHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	x := &requestBounds{rc: *http.NewResponseController(w)}
	x.w = boundedWriter{ResponseWriter: w, rc: &x.rc, timeout: b.writeTimeout, slack: armSlack(b.writeTimeout)}
	// net/http clears the connection's write deadline after each answer,
	// so none runs while the call does. Every write through x.w arms it
	// first, and so does the end below (net/http writes out what is still
	// buffered after the handler returns); the one write net/http makes
	// by itself in between is a 100 Continue, when the handler first
	// reads the body of a request that expects one.
	if len(r.Header["Expect"]) > 0 {
		x.w.arm()
	}
	if r.Body != nil && r.Body != http.NoBody {
		_ = x.rc.SetReadDeadline(time.Now().Add(b.readTimeout))
		x.body = deadlineBody{ReadCloser: r.Body, rc: &x.rc}
		r.Body = &x.body
	}
	b.next.ServeHTTP(&x.w, r)
	x.w.arm()
}

// deadlineBody lifts the read deadline once the body has been read whole.
type deadlineBody struct {
	io.ReadCloser
	rc     *http.ResponseController
	lifted bool
}

func (d *deadlineBody) Read(p []byte) (int, error) {
	n, err := d.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !d.lifted {
		d.lifted = true
		_ = d.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// armSlack is how much later than timeout a write deadline may be set, so
// that the writes of one answer, made within that slack of each other,
// arm the connection's deadline once rather than each (arming resets a
// runtime timer). Every write still has at least timeout to finish; a
// client that stops reading is cut at most the slack later.
func armSlack(timeout time.Duration) time.Duration {
	return min(timeout/16, 5*time.Millisecond)
}

// boundedWriter arms the write deadline before every write that may reach
// the socket. Between writes (a passthrough streaming a slow backend) no
// deadline is running out, since the next write arms it again.
//
// One net/http hook does not pass through a wrapper: http.MaxBytesReader
// (the MCP front's body bound) cannot mark the connection to close when
// the bound is hit. net/http then discards what is left of the body, up
// to 256 KiB and within the read deadline, before it reuses or closes the
// connection; the answer is the same.
type boundedWriter struct {
	http.ResponseWriter
	rc             *http.ResponseController
	timeout, slack time.Duration
	// until is the write deadline this writer set last; zero for none, or
	// when the handler set its own.
	until time.Time
}

// arm sets the write deadline to timeout (and up to the slack) from now,
// unless the one already set leaves at least timeout.
func (w *boundedWriter) arm() {
	now := time.Now()
	if !w.until.IsZero() && w.until.Sub(now) >= w.timeout {
		return
	}
	w.until = now.Add(w.timeout + w.slack)
	_ = w.rc.SetWriteDeadline(w.until)
}

func (w *boundedWriter) WriteHeader(code int) {
	w.arm() // a 1xx header is written at once
	w.ResponseWriter.WriteHeader(code)
}

func (w *boundedWriter) Write(p []byte) (int, error) {
	w.arm()
	return w.ResponseWriter.Write(p)
}

// FlushError is what http.ResponseController.Flush calls.
func (w *boundedWriter) FlushError() error {
	w.arm()
	return w.rc.Flush()
}

// Flush is for handlers that assert http.Flusher.
func (w *boundedWriter) Flush() { _ = w.FlushError() }

// SetWriteDeadline is what http.ResponseController.SetWriteDeadline calls:
// the handler's own deadline holds until the next write arms the bound
// again.
func (w *boundedWriter) SetWriteDeadline(t time.Time) error {
	w.until = time.Time{}
	return w.rc.SetWriteDeadline(t)
}

// Unwrap gives http.ResponseController the connection's own writer.
func (w *boundedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
