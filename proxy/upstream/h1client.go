package upstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// H1Client sends HTTP/1.1 requests to one plain-HTTP backend on the calling
// goroutine, over pooled keep-alive connections: toolgate's fast client
// (server.upstream_client: fast, the default).
//
// net/http.Transport runs two goroutines per connection and hands each
// request and each answer between them and the caller over channels. In a
// sidecar, which forwards every call its service gets, those hand-offs cost
// about a tenth of the CPU of a call (bench/RESULTS.md). This client keeps
// net/http's wire code (Request.Write, ReadResponse) and drops the
// hand-offs: the caller writes the request and reads the answer itself.
//
// It also knows exactly what reached the wire, which the at-most-once
// rules need. A request goes out once; it is sent again, on a new
// connection, only when nothing of it was written, or when a reused
// connection closed before any byte of an answer and the caller said a
// resend is safe (a read-only tool, or a backend that dedupes on the
// forwarded key), never because of the request's method.
//
// Bytes belong to the request that asked for them. Every pooled connection
// is peeked before a request is written on it: one the backend closed is
// dropped before it can swallow a side-effecting call (a keep-alive timeout
// costs a dial, not an unknown outcome), and one holding bytes nobody asked
// for (a late second answer, a body longer than its Content-Length) is
// poisoned and closed, so those bytes are never read as another call's
// answer. An answer followed by bytes already read is closed the same way.
// What no HTTP/1.1 client can tell apart is a stray that arrives after the
// peek, while the request is on its way: it is read as the answer, as
// net/http would read it.
//
// HTTPS backends keep net/http.Transport (TLS, HTTP/2): NetHTTPClient.
type H1Client struct {
	addr        string // host:port
	dial        func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle     int
	idleTimeout time.Duration

	mu    sync.Mutex
	idle  []*h1Conn   // oldest first; reuse takes the newest
	sweep *time.Timer // closes connections idle past idleTimeout
}

// max1xx bounds the informational answers read before the real one.
const max1xx = 5

// H1Supported says this system can peek at a socket without reading it,
// which the H1Client needs before it reuses a connection (New falls back
// to net/http where it cannot).
const H1Supported = peekable

// H1Options configure an H1Client.
type H1Options struct {
	// Addr is the backend's host:port.
	Addr string
	// MaxIdle bounds the connections kept for reuse (the upstream's
	// max_concurrent).
	MaxIdle int
	// IdleTimeout closes a connection idle for longer. Zero means 90s, as
	// net/http's.
	IdleTimeout time.Duration
	// Dial makes a connection. Nil means a net.Dialer with a 5s timeout
	// and 30s keep-alive.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// NewH1Client is a client of the backend at o.Addr.
func NewH1Client(o H1Options) *H1Client {
	if o.Dial == nil {
		o.Dial = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 90 * time.Second
	}
	return &H1Client{addr: o.Addr, dial: o.Dial, maxIdle: o.MaxIdle, idleTimeout: o.IdleTimeout}
}

// writers are the buffers requests are written through, shared by every
// connection.
var writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}

// h1Conn is one connection with its read buffer and byte counts.
type h1Conn struct {
	nc      net.Conn
	br      *bufio.Reader
	read    int64 // bytes read from nc
	written int64 // bytes written to nc
	limit   int64 // read may not pass this while an answer's header is read; 0: no limit
	idleAt  time.Time
	peek    peeker // checks the socket before reuse (alive)
	// deadline says a call's deadline is set on nc (stopAtEnd), to be
	// taken off before the connection goes back to the pool.
	deadline bool
	abort    func() // stopIO, for the hook on the context's end
}

func (pc *h1Conn) Read(p []byte) (int, error) {
	if pc.limit > 0 {
		left := pc.limit - pc.read
		if left <= 0 {
			return 0, errHeaderTooLarge
		}
		if int64(len(p)) > left {
			p = p[:left]
		}
	}
	n, err := pc.nc.Read(p)
	pc.read += int64(n)
	return n, err
}

func (pc *h1Conn) Write(p []byte) (int, error) {
	n, err := pc.nc.Write(p)
	pc.written += int64(n)
	return n, err
}

// aLongTimeAgo is a deadline in the past: it stops a connection's I/O now.
var aLongTimeAgo = time.Unix(1, 0)

// Send implements Client: it sends req and reads its answer into r, with
// at most o.MaxBody bytes of body. The context's end (its deadline, or a
// cancellation) stops the request; a context that never ends does not
// bound it.
//
// o.Resend says a request written whole may go out again after its reused
// connection closed before any byte of an answer: a backend that closed
// an idle connection just as the request arrived usually never read it,
// but nothing proves it, so only a read-only tool or a backend that
// dedupes on the forwarded key may take that chance. A request of which
// nothing was written is always sent again.
func (c *H1Client) Send(ctx context.Context, req *http.Request, o SendOptions, r *Report) {
	*r = Report{}
	if err := ctx.Err(); err != nil {
		r.Err = err
		return
	}
	for fresh := false; ; fresh = true {
		pc, reused, err := c.conn(ctx, fresh)
		if err != nil {
			r.Err = err
			return
		}
		r.Connected = true
		// The context ends at the call's deadline or when the caller goes
		// away; either way the connection's I/O stops then.
		stop := stopAtEnd(ctx, pc)

		w0 := pc.written
		// The write buffer is the connection's only while it writes: a
		// call waiting on its answer, or an idle connection, holds none.
		bw := writers.Get().(*bufio.Writer)
		bw.Reset(pc)
		err = WriteRequest(bw, req)
		if err == nil {
			err = bw.Flush()
		}
		bw.Reset(nil)
		writers.Put(bw)
		if err != nil {
			stop()
			pc.close()
			if reused && pc.written == w0 && rewind(req) {
				continue // nothing of it left: the connection was dead
			}
			r.Err = err
			return
		}
		r.Writes++

		r0 := pc.read
		resp, err := readFinal(pc, req)
		if err != nil {
			stop()
			pc.close()
			if reused && pc.read == r0 && closedEarly(err) && o.Resend && rewind(req) {
				continue // the backend closed it as the request arrived
			}
			r.Err = err
			return
		}
		r.Status, r.Header = resp.StatusCode, resp.Header
		r.readAnswerBody(resp.Body, o.MaxBody, resp.ContentLength)
		// A body read whole is at EOF, so closing it reads nothing more;
		// a body left unread is never drained, the connection goes. Bytes
		// read past the answer's end belong to no request: the connection
		// is poisoned. Bytes still in the socket are found by the peek
		// before the connection's next use, which also sees those that
		// arrive while it sits in the pool.
		keep := r.BodyErr == nil && !resp.Close && !req.Close && resp.StatusCode != http.StatusSwitchingProtocols
		if r.BodyErr == nil {
			resp.Body.Close()
		}
		if stop() && keep && pc.br.Buffered() == 0 && pc.clearDeadline() {
			c.put(pc)
		} else {
			pc.close()
		}
		return
	}
}

// stopAtEnd makes the connection's I/O stop when ctx ends, until the
// returned stop is called; stop reports whether the I/O was left
// untouched. A Cancellation has its deadline set on the connection (the
// runtime's poller times it, with no timer of the context's) and only the
// context it ends with watched: nothing at all for one that never ends,
// such as the extproc front's. Any other context is watched whole, with a
// hook that stops the I/O, and the connection keeps no deadline.
func stopAtEnd(ctx context.Context, pc *h1Conn) (stop func() bool) {
	watch := ctx
	if cc, ok := ctx.(Cancellation); ok {
		if d, ok := cc.Deadline(); ok {
			_ = pc.nc.SetDeadline(d)
			pc.deadline = true
		}
		watch = cc.EndsWith()
	}
	if watch.Done() == nil {
		return neverStopped
	}
	if pc.abort == nil {
		pc.abort = pc.stopIO // made once per connection, not per request
	}
	return context.AfterFunc(watch, pc.abort)
}

// stopIO stops the connection's I/O now: a read or write under way fails
// with a timeout.
func (pc *h1Conn) stopIO() { _ = pc.nc.SetDeadline(aLongTimeAgo) }

// neverStopped is the stop of a context that never ends.
func neverStopped() bool { return true }

// clearDeadline takes the call's deadline off a connection that goes back
// to the pool, so that a pooled connection has none. It reports whether
// the connection may be kept.
func (pc *h1Conn) clearDeadline() bool {
	if !pc.deadline {
		return true
	}
	pc.deadline = false
	return pc.nc.SetDeadline(time.Time{}) == nil
}

// WriteRequest writes req as HTTP/1.1: what Request.Write writes for the
// requests toolgate makes (a known length, no trailers, no 100-continue),
// without its allocations per call. Header names come from the policy,
// which checks them; a value loses its control characters, as with
// Request.Write, so no value can end a line. The empty body that keeps
// net/http from resending a bodiless request (noReplay) is written as no
// body, as the H1Client, which never gets one, would write the request:
// the dry run (proxy.Try) shows what the net/http client was handed that
// way.
func WriteRequest(w *bufio.Writer, req *http.Request) error {
	w.WriteString(req.Method)
	w.WriteByte(' ')
	if req.URL.Opaque != "" {
		w.WriteString(req.URL.Opaque)
	} else {
		w.WriteString(req.URL.EscapedPath())
	}
	if req.URL.RawQuery != "" {
		w.WriteByte('?')
		w.WriteString(req.URL.RawQuery)
	}
	w.WriteString(" HTTP/1.1\r\nHost: ")
	writeHeaderValue(w, req.Host)
	w.WriteString("\r\n")
	for k, vs := range req.Header {
		switch k {
		case "Host", "Content-Length", "Transfer-Encoding", "Trailer":
			continue // written from the request's fields, or never
		}
		for _, v := range vs {
			w.WriteString(k)
			w.WriteString(": ")
			writeHeaderValue(w, v)
			w.WriteString("\r\n")
		}
	}
	_, none := req.Body.(emptyBody)
	switch {
	case req.Body != nil && req.Body != http.NoBody && !none:
		w.WriteString("Content-Length: ")
		w.Write(strconv.AppendInt(w.AvailableBuffer(), req.ContentLength, 10))
		w.WriteString("\r\n\r\n")
		n, err := io.Copy(w, req.Body)
		req.Body.Close()
		if err != nil {
			return err
		}
		if n != req.ContentLength {
			return fmt.Errorf("request body is %d bytes, not the %d declared", n, req.ContentLength)
		}
		return nil
	case req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch:
		w.WriteString("Content-Length: 0\r\n\r\n")
	default:
		w.WriteString("\r\n")
	}
	return nil
}

// writeHeaderValue writes v with every control character but tab turned
// into a space and the ends trimmed.
func writeHeaderValue(w *bufio.Writer, v string) {
	v = strings.TrimSpace(v)
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			b := []byte(v)
			for j := i; j < len(b); j++ {
				if c := b[j]; c < 0x20 && c != '\t' || c == 0x7f {
					b[j] = ' '
				}
			}
			w.Write(b)
			return
		}
	}
	w.WriteString(v)
}

// readFinal reads the final answer to req, skipping informational ones.
// Everything before the final answer's body counts against
// maxResponseHeaderBytes: http.ReadResponse keeps a whole header line in
// memory, so the bound has to sit below it, on the connection.
func readFinal(pc *h1Conn, req *http.Request) (*http.Response, error) {
	pc.limit = pc.read - int64(pc.br.Buffered()) + maxResponseHeaderBytes
	defer func() { pc.limit = 0 }()
	for range max1xx + 1 {
		resp, err := http.ReadResponse(pc.br, req)
		if err != nil {
			if errors.Is(err, errHeaderTooLarge) {
				return nil, errHeaderTooLarge
			}
			return nil, err
		}
		if err := checkHeaderCount(resp.Header); err != nil {
			return nil, err
		}
		if resp.StatusCode < 100 || resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
	}
	return nil, errors.New("too many informational answers")
}

// closedEarly says the connection ended before an answer began: a backend
// that closed an idle connection as the request reached it.
func closedEarly(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isConnReset(err)
}

func isConnReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

// rewind makes req's body readable again for a resend.
func rewind(req *http.Request) bool {
	if req.Body == nil || req.Body == http.NoBody {
		return true
	}
	if req.GetBody == nil {
		return false
	}
	body, err := req.GetBody()
	if err != nil {
		return false
	}
	req.Body = body
	return true
}

// conn returns an idle connection (reused=true) or dials a new one; fresh
// always dials. Every idle connection is peeked before it is handed out,
// however briefly it sat in the pool: a backend can close a connection or
// write past an answer within microseconds of the answer.
func (c *H1Client) conn(ctx context.Context, fresh bool) (*h1Conn, bool, error) {
	if !fresh {
		for {
			pc := c.take()
			if pc == nil {
				break
			}
			if !pc.alive() {
				pc.close()
				continue
			}
			return pc, true, nil
		}
	}
	nc, err := c.dial(ctx, "tcp", c.addr)
	if err != nil {
		return nil, false, err
	}
	pc := &h1Conn{nc: nc}
	pc.br = bufio.NewReaderSize(pc, 4096)
	return pc, false, nil
}

// take pops the most recently used idle connection.
func (c *H1Client) take() *h1Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.idle)
	if n == 0 {
		return nil
	}
	pc := c.idle[n-1]
	c.idle[n-1] = nil
	c.idle = c.idle[:n-1]
	return pc
}

// put keeps a connection for reuse, or closes it when the pool is full or
// connections cannot be checked before reuse on this platform.
func (c *H1Client) put(pc *h1Conn) {
	pc.idleAt = time.Now()
	c.mu.Lock()
	if len(c.idle) >= c.maxIdle || !peekable {
		c.mu.Unlock()
		pc.close()
		return
	}
	c.idle = append(c.idle, pc)
	if c.sweep == nil {
		c.sweep = time.AfterFunc(c.idleTimeout, c.sweepIdle)
	}
	c.mu.Unlock()
}

// sweepIdle closes the connections idle for longer than idleTimeout and
// sets the timer for the next one.
func (c *H1Client) sweepIdle() {
	c.mu.Lock()
	now := time.Now()
	n := 0
	for n < len(c.idle) && now.Sub(c.idle[n].idleAt) >= c.idleTimeout {
		n++
	}
	stale := make([]*h1Conn, n)
	copy(stale, c.idle[:n])
	rest := copy(c.idle, c.idle[n:])
	clear(c.idle[rest:])
	c.idle = c.idle[:rest]
	switch {
	case rest > 0 && c.sweep != nil:
		c.sweep.Reset(c.idleTimeout - now.Sub(c.idle[0].idleAt))
	case rest > 0: // CloseIdleConnections raced this sweep
		c.sweep = time.AfterFunc(c.idleTimeout-now.Sub(c.idle[0].idleAt), c.sweepIdle)
	default:
		c.sweep = nil
	}
	c.mu.Unlock()
	for _, pc := range stale {
		pc.close()
	}
}

// Idle reports the connections in the pool, and how many of them are no
// longer quiet: the backend closed them or sent bytes nobody asked for,
// which their next use finds (and drops them). For tests and diagnostics:
// it peeks at every pooled connection.
func (c *H1Client) Idle() (n, stirred int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, pc := range c.idle {
		if !pc.alive() {
			stirred++
		}
	}
	return len(c.idle), stirred
}

// CloseIdleConnections closes every idle connection. Connections in use
// are kept when their calls end, as with net/http.
func (c *H1Client) CloseIdleConnections() {
	c.mu.Lock()
	idle := c.idle
	c.idle = nil
	if c.sweep != nil {
		c.sweep.Stop()
		c.sweep = nil
	}
	c.mu.Unlock()
	for _, pc := range idle {
		pc.close()
	}
}

func (pc *h1Conn) close() { _ = pc.nc.Close() }
