// Package clienttest is the conformance suite of upstream.Client, in the
// pattern of go-cloud's blob/drivertest: one exported suite
// (RunConformanceTests) that every client runs, so that "as safe on the
// wire as the library" is a test rather than a claim. toolgate's own
// HTTP/1.1 client (upstream.H1Client) and net/http's
// (upstream.NetHTTPClient over the transport toolgate makes) both pass it
// (proxy/upstream's conformance_test.go).
//
// Each scenario is a misbehaviour seen from real backends, played by a
// raw TCP backend (RawBackend) that answers, closes or resets at exactly
// the point it means to. The suite checks the facts a client reports
// (upstream.Report) and what reached the backend, never what they mean for
// a call: that is the pipeline's (package proxy).
//
// Where the two clients differ, the suite states the promise both keep
// and holds the client that can to the stronger one (Harness's
// capabilities). toolgate's client peeks at a pooled connection before it
// writes a request on it (PeeksBeforeReuse), so a backend's close or stray
// bytes that reached it before a request never meet that request;
// net/http's transport sees them only as its reader goroutine gets to
// them, and a request that races it may meet a connection that just
// closed. toolgate's client counts the bytes it wrote (CountsWrites), so a
// request of which nothing left is sent again on a new connection, or
// reported with Writes 0; net/http's trace counts a request written once
// it is buffered, so it may report a write that never left, and it does
// not send such a request again. Both promise that no request is sent
// twice unless SendOptions.Resend allows it, that no request is reported
// answered by bytes that were not its answer, and that no write the
// backend read goes unreported. net/http also reads and drops the rest of
// an answer it did not keep, to reuse the connection, where toolgate's
// client closes it; both keep the rest from being read as another answer.
package clienttest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/boundedio"
	"github.com/toolgate/toolgate/proxy/upstream"
)

// Options are what a harness makes a client with.
type Options struct {
	// Addr is the plain-HTTP backend's host:port.
	Addr string
	// MaxIdle bounds the connections kept for reuse.
	MaxIdle int
	// IdleTimeout closes a connection idle for longer; zero means the
	// client's default.
	IdleTimeout time.Duration
	// Dial makes a connection; nil means the client's default.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Harness is one client under test.
type Harness struct {
	// New makes a client with o.
	New func(t *testing.T, o Options) upstream.Client
	// PeeksBeforeReuse says the client checks a pooled connection before
	// it writes a request on it: a close or stray bytes that reached the
	// client before a request never meet that request. The suite holds
	// such a client to the strong form of the scenarios that depend on it.
	PeeksBeforeReuse bool
	// Stirred reports that a connection in c's pool is no longer quiet:
	// bytes or an end arrived on it. The suite waits for it before the
	// request that must not meet them. Needed with PeeksBeforeReuse; a
	// client without it is expected to close such a connection itself,
	// which the backend sees.
	Stirred func(c upstream.Client) bool
	// CountsWrites says the client counts what it wrote itself, so a
	// request of which nothing, or only part, reached the socket is
	// reported with Writes 0, and one of which nothing was written on a
	// reused connection goes out again on a new one. net/http's trace
	// counts a request as written once it is buffered whole, even when
	// flushing it then fails: its Writes may say 1 for a request that
	// never left, which makes the pipeline call the outcome unknown
	// rather than nothing done. That is more cautious, never less, and
	// the suite holds such a client to it.
	CountsWrites bool
}

// okAnswer is a small JSON answer.
const okAnswer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"

// whoAnswer answers with the request's own id: whoever reads it can tell
// whose answer it is.
func whoAnswer(c *RawConn) string {
	return JSONAnswer(http.StatusOK, `{"who":"`+c.Req.Header.Get("X-Request-Id")+`"}`)
}

// suite is one scenario's client and what it needs.
type suite struct {
	h Harness
}

func (s suite) client(t *testing.T, o Options) upstream.Client {
	t.Helper()
	if o.MaxIdle == 0 {
		o.MaxIdle = 4
	}
	c := s.h.New(t, o)
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// request is a request to b with id as its X-Request-Id.
func request(t *testing.T, b *RawBackend, method, body, id string, header http.Header) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, b.URL()+"/x", rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if id != "" {
		req.Header.Set("X-Request-Id", id)
	}
	return req
}

// send sends req with resend and the body limit maxBody (1 MiB when 0),
// and returns the report; its buffer goes back with the test.
func send(t *testing.T, ctx context.Context, c upstream.Client, req *http.Request, resend bool, maxBody int64) *upstream.Report {
	t.Helper()
	if maxBody == 0 {
		maxBody = 1 << 20
	}
	r := new(upstream.Report)
	c.Send(ctx, req, upstream.SendOptions{MaxBody: maxBody, Resend: resend}, r)
	t.Cleanup(r.Release)
	return r
}

// eventually polls cond until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// RunConformanceTests runs every scenario against the client h makes.
func RunConformanceTests(t *testing.T, h Harness) {
	if h.PeeksBeforeReuse && h.Stirred == nil {
		t.Fatal("a harness that peeks before reuse needs Stirred")
	}
	s := suite{h: h}
	t.Run("keep-alive connections are reused whatever the body's framing", s.reuse)
	t.Run("a connection is not reused when it may hold more than its answer", s.noReuse)
	t.Run("informational answers are skipped, and an endless stream of them is an error after the write", s.informational)
	t.Run("a body over the limit is not kept", s.bodyOverLimit)
	t.Run("an answer's header is bounded in bytes and fields", s.headerBounds)
	t.Run("bytes nobody asked for are never another request's answer", s.strayBytes)
	t.Run("a connection the backend closed while idle never takes a request twice", s.closedIdle)
	t.Run("a request that went out whole goes out again only when Resend says so", s.resend)
	t.Run("a request of which nothing was written is sent again or reported unwritten", s.nothingWritten)
	t.Run("a request cut off midway is not reported as written", s.halfWritten)
	t.Run("an answer the backend sent before reading the request is the answer", s.earlyAnswer)
	t.Run("the context's end stops the request", s.contextEnd)
	t.Run("idle connections are bounded and closed after the idle timeout", s.idlePool)
}

func (s suite) reuse(t *testing.T) {
	chunked := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
	b := NewRawBackend(t, func(c *RawConn, n int) bool {
		if n%2 == 0 {
			return c.Answer(chunked)
		}
		return c.Answer(okAnswer)
	})
	c := s.client(t, Options{Addr: b.Addr()})
	for i := range 6 {
		r := send(t, t.Context(), c, request(t, b, "GET", "", "", nil), true, 0)
		if r.Err != nil || r.BodyErr != nil {
			t.Fatalf("request %d: %v %v", i, r.Err, r.BodyErr)
		}
		want := `{"ok":true}`
		if i%2 == 1 {
			want = "hello"
		}
		if r.Status != 200 || string(r.Body) != want || r.Writes != 1 || !r.Connected || r.Resent() {
			t.Fatalf("request %d: %d %q, writes %d, connected %v", i, r.Status, r.Body, r.Writes, r.Connected)
		}
	}
	if got := b.Conns(); got != 1 {
		t.Errorf("connections = %d, want 1 (kept alive)", got)
	}
}

func (s suite) noReuse(t *testing.T) {
	tests := []struct {
		name   string
		answer string
		max    int64
		// drainable: what is left is the rest of the answer, which a
		// client may read and drop to keep the connection (net/http
		// does); toolgate's client lets the connection go.
		drainable bool
	}{
		{"an answer that says Connection: close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}", 1 << 20, false},
		{"a body over the limit", okAnswer, 4, true},
		{"an answer followed by stray bytes", okAnswer + "garbage", 1 << 20, false},
		{"a 1.0 answer without a length", "HTTP/1.0 200 OK\r\n\r\n{}", 1 << 20, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewRawBackend(t, func(c *RawConn, n int) bool {
				c.Answer(tt.answer)
				return !strings.HasPrefix(tt.answer, "HTTP/1.0")
			})
			c := s.client(t, Options{Addr: b.Addr()})
			for i := range 2 {
				r := send(t, t.Context(), c, request(t, b, "GET", "", "", nil), true, tt.max)
				if r.Err != nil || r.Status != 200 {
					t.Fatalf("request %d: status %d, %v", i, r.Status, r.Err)
				}
				if tt.drainable && !s.h.PeeksBeforeReuse {
					continue
				}
				// The client lets the connection go: the backend sees it end.
				eventually(t, "the connection to close", func() bool { return b.Open() == 0 })
			}
			if got := b.Conns(); got != 2 && (!tt.drainable || s.h.PeeksBeforeReuse) {
				t.Errorf("connections = %d, want 2 (none reused)", got)
			}
		})
	}
}

func (s suite) informational(t *testing.T) {
	b := NewRawBackend(t, func(c *RawConn, n int) bool {
		return c.Answer("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n" + okAnswer)
	})
	c := s.client(t, Options{Addr: b.Addr()})
	r := send(t, t.Context(), c, request(t, b, "POST", `{"a":1}`, "", nil), true, 0)
	if r.Err != nil || r.Status != 200 || string(r.Body) != `{"ok":true}` {
		t.Fatalf("status %d body %q err %v", r.Status, r.Body, r.Err)
	}

	// An endless stream of them ends the request. toolgate's client stops
	// after five (as net/http did before Go 1.24), net/http's when their
	// headers pass the header bound: both end it, after the write.
	endless := NewRawBackend(t, func(c *RawConn, n int) bool {
		c.Answer(strings.Repeat("HTTP/1.1 102 Processing\r\n\r\n", 4096))
		return true
	})
	c2 := s.client(t, Options{Addr: endless.Addr()})
	if r := send(t, t.Context(), c2, request(t, endless, "GET", "", "", nil), true, 0); r.Err == nil || r.Writes != 1 {
		t.Errorf("an endless stream of informational answers: status %d, err %v, writes %d; want an error after the write", r.Status, r.Err, r.Writes)
	}
}

func (s suite) bodyOverLimit(t *testing.T) {
	b := NewRawBackend(t, func(c *RawConn, n int) bool {
		return c.Answer(JSONAnswer(200, `{"big":"`+strings.Repeat("x", 100)+`"}`))
	})
	c := s.client(t, Options{Addr: b.Addr()})
	r := send(t, t.Context(), c, request(t, b, "GET", "", "", nil), true, 64)
	if r.Err != nil || r.Status != 200 || !errors.Is(r.BodyErr, boundedio.ErrBodyTooLarge) || r.Body != nil || r.Writes != 1 {
		t.Errorf("status %d, body %q, body error %v, err %v, writes %d; want 200 with the body refused as too large",
			r.Status, r.Body, r.BodyErr, r.Err, r.Writes)
	}
}

func (s suite) headerBounds(t *testing.T) {
	tests := []struct {
		name  string
		serve func(c *RawConn, n int) bool
	}{
		{"a 256 MiB header", func(c *RawConn, n int) bool { StreamHeaderBomb(c); return false }},
		{"150 header fields", func(c *RawConn, n int) bool { return c.Answer(ManyFields()) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := NewRawBackend(t, tt.serve)
			c := s.client(t, Options{Addr: b.Addr()})
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			r := send(t, t.Context(), c, request(t, b, "POST", `{"a":1}`, "", nil), false, 0)
			runtime.ReadMemStats(&after)
			if r.Err == nil || r.Status != 0 || r.Writes != 1 {
				t.Errorf("status %d, err %v, writes %d; want no answer after the write", r.Status, r.Err, r.Writes)
			}
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
				t.Errorf("the request allocated %d MiB", alloc>>20)
			}
		})
	}
}

// settle waits until the client has seen what reached its pooled
// connection: a client that peeks before reuse finds it stirred; any other
// closes the connection, which the backend sees.
func (s suite) settle(t *testing.T, c upstream.Client, b *RawBackend, open int64) {
	t.Helper()
	if s.h.PeeksBeforeReuse {
		eventually(t, "the pooled connection to stir", func() bool { return s.h.Stirred(c) })
		return
	}
	eventually(t, "the client to close the connection", func() bool { return b.Open() <= open })
}

func (s suite) strayBytes(t *testing.T) {
	tests := []struct {
		name          string
		method        string
		answer, stray string // A's answer, then the stray bytes
	}{
		{name: "a late second answer", method: "GET",
			answer: JSONAnswer(200, `{"who":"A"}`), stray: JSONAnswer(200, `{"who":"A-late"}`)},
		{name: "a body longer than its Content-Length", method: "GET",
			answer: "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"who\":\"A\"}",
			stray:  `,"more":"than promised"}`},
		{name: "a stray 503 after a side-effecting answer", method: "POST",
			answer: JSONAnswer(201, `{"who":"A"}`), stray: "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			writeStray, strayWritten := make(chan struct{}), make(chan struct{})
			b := NewRawBackend(t, func(c *RawConn, n int) bool {
				if c.Req.Header.Get("X-Request-Id") == "A" {
					c.Answer(tt.answer)
					<-writeStray
					c.Answer(tt.stray) // late: the connection is idle in the client's pool
					close(strayWritten)
					return true // and the connection is served on
				}
				return c.Answer(whoAnswer(c))
			})
			c := s.client(t, Options{Addr: b.Addr()})
			resend := tt.method == "GET"
			a := send(t, t.Context(), c, request(t, b, tt.method, `{"n":1}`, "A", nil), resend, 0)
			if a.Err != nil || string(a.Body) != `{"who":"A"}` {
				t.Fatalf("A got %q, %v", a.Body, a.Err)
			}
			close(writeStray)
			<-strayWritten
			s.settle(t, c, b, 0)
			r := send(t, t.Context(), c, request(t, b, tt.method, `{"n":2}`, "B", nil), resend, 0)
			if r.Err != nil || r.Status != 200 || string(r.Body) != `{"who":"B"}` || r.Writes != 1 {
				t.Errorf("B got %d %q (err %v, writes %d), want its own answer", r.Status, r.Body, r.Err, r.Writes)
			}
			if got := b.Received("B"); got != 1 {
				t.Errorf("the backend received B %d times, want once", got)
			}
		})
	}
}

func (s suite) closedIdle(t *testing.T) {
	tests := []struct {
		name string
		wait bool // the close reaches the client before B's request
	}{
		{"the close reached the client before the request", true},
		{"the close races the request", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			closed := make(chan struct{}, 1)
			b := NewRawBackend(t, func(c *RawConn, n int) bool {
				c.Answer(whoAnswer(c))
				if c.Req.Header.Get("X-Request-Id") == "A" {
					c.Close()
					closed <- struct{}{}
					return false
				}
				return true
			})
			c := s.client(t, Options{Addr: b.Addr()})
			if a := send(t, t.Context(), c, request(t, b, "POST", `{"n":1}`, "A", nil), false, 0); a.Err != nil {
				t.Fatal(a.Err)
			}
			<-closed
			if tt.wait && s.h.PeeksBeforeReuse {
				s.settle(t, c, b, 0)
			}
			r := send(t, t.Context(), c, request(t, b, "POST", `{"n":2}`, "B", nil), false, 0)
			if got := b.Received("B"); got > 1 || r.Writes > 1 {
				t.Fatalf("B reached the backend %d times (writes %d): a side effect went out twice", got, r.Writes)
			}
			switch {
			case r.Err == nil && (r.Status != 200 || string(r.Body) != `{"who":"B"}`):
				t.Errorf("B got %d %q", r.Status, r.Body)
			case r.Err != nil && (tt.wait && s.h.PeeksBeforeReuse || r.Writes != 1 && b.Received("B") == 1):
				// A client that peeks found the close before it wrote;
				// any client reports a write the backend read.
				t.Errorf("B failed (%v, writes %d, received %d)", r.Err, r.Writes, b.Received("B"))
			}
			if tt.wait && s.h.PeeksBeforeReuse && b.Conns() != 2 {
				t.Errorf("B went out over connection %d, want a second one", b.Conns())
			}
		})
	}
}

func (s suite) resend(t *testing.T) {
	tests := []struct {
		name       string
		method     string
		body       string
		header     http.Header
		resend     bool
		broken     func(c *RawConn) // what the backend does with request 2 on the first connection
		wantErr    bool
		wantWrites int
	}{
		{
			name: "a read-only GET that met a connection closed on arrival is sent again", method: "GET", resend: true,
			broken: func(c *RawConn) { c.Close() }, wantWrites: 2,
		},
		{
			name: "a side-effecting GET that met a connection closed on arrival is not", method: "GET",
			broken: func(c *RawConn) { c.Close() }, wantErr: true, wantWrites: 1,
		},
		{
			name: "a side-effecting POST that met a connection closed on arrival is not", method: "POST", body: `{"a":1}`,
			broken: func(c *RawConn) { c.Close() }, wantErr: true, wantWrites: 1,
		},
		{
			name: "a side-effecting POST with an Idempotency-Key header the backend does not dedupe on is not", method: "POST", body: `{"a":1}`,
			header: http.Header{"Idempotency-Key": {"k1"}},
			broken: func(c *RawConn) { c.Close() }, wantErr: true, wantWrites: 1,
		},
		{
			name: "a POST to a backend that dedupes on its key is", method: "POST", body: `{"a":1}`, resend: true,
			header: http.Header{"Idempotency-Key": {"k1"}},
			broken: func(c *RawConn) { c.Close() }, wantWrites: 2,
		},
		{
			name: "a side-effecting POST that met a connection reset on arrival is not", method: "POST", body: `{"a":1}`,
			broken: func(c *RawConn) { c.Reset() }, wantErr: true, wantWrites: 1,
		},
		{
			name: "a request whose answer broke off is not, even read-only", method: "GET", resend: true,
			broken: func(c *RawConn) { c.Answer("HTTP/1.1 200 OK\r\nContent-Len"); c.Close() }, wantErr: true, wantWrites: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var first atomic.Bool
			b := NewRawBackend(t, func(c *RawConn, n int) bool {
				if n == 2 && first.CompareAndSwap(false, true) {
					tt.broken(c)
					return false
				}
				return c.Answer(okAnswer)
			})
			c := s.client(t, Options{Addr: b.Addr()})
			if r := send(t, t.Context(), c, request(t, b, tt.method, tt.body, "A", tt.header), tt.resend, 0); r.Err != nil {
				t.Fatal(r.Err)
			}
			// The connection is open when the request is written; the
			// backend closes it once the request arrived.
			r := send(t, t.Context(), c, request(t, b, tt.method, tt.body, "B", tt.header), tt.resend, 0)
			if (r.Err != nil) != tt.wantErr || r.Writes != tt.wantWrites {
				t.Errorf("err %v writes %d, want error %v writes %d", r.Err, r.Writes, tt.wantErr, tt.wantWrites)
			}
			if got := b.Received("B"); got != tt.wantWrites {
				t.Errorf("the backend read B %d times, want %d", got, tt.wantWrites)
			}
		})
	}
}

func (s suite) nothingWritten(t *testing.T) {
	t.Run("on a reused connection", func(t *testing.T) {
		// The backend's reset arrived after the check before reuse: the
		// write fails before a byte of the request went out.
		b := NewRawBackend(t, func(c *RawConn, n int) bool { return c.Answer(whoAnswer(c)) })
		var fail atomic.Bool
		c := s.client(t, Options{Addr: b.Addr(), Dial: FailingDial(&fail, 0)})
		if r := send(t, t.Context(), c, request(t, b, "POST", `{"a":1}`, "A", nil), false, 0); r.Err != nil {
			t.Fatal(r.Err)
		}
		fail.Store(true)
		r := send(t, t.Context(), c, request(t, b, "POST", `{"a":1}`, "B", nil), false, 0)
		switch {
		case b.Received("B") > 1 || r.Writes > 1:
			t.Errorf("B reached the backend %d times (writes %d): a side effect went out twice", b.Received("B"), r.Writes)
		case r.Err == nil && (string(r.Body) != `{"who":"B"}` || r.Writes != 1 || b.Received("B") != 1 || b.Conns() != 2):
			t.Errorf("B sent again: %q, writes %d, received %d over %d connections; want its answer, once, on a second connection",
				r.Body, r.Writes, b.Received("B"), b.Conns())
		case r.Err != nil && s.h.CountsWrites:
			t.Errorf("B failed (%v): a request of which nothing was written is sent again on a new connection", r.Err)
		case r.Err != nil && b.Received("B") != 0:
			t.Errorf("B failed (%v) after the backend read it", r.Err)
		}
	})
	t.Run("on a new connection", func(t *testing.T) {
		b := NewRawBackend(t, func(c *RawConn, n int) bool { return c.Answer(whoAnswer(c)) })
		var fail atomic.Bool
		fail.Store(true)
		c := s.client(t, Options{Addr: b.Addr(), Dial: FailingDial(&fail, 0)})
		r := send(t, t.Context(), c, request(t, b, "POST", `{"a":1}`, "A", nil), false, 0)
		if r.Err == nil || !r.Connected || b.Requests() != 0 || r.Writes > 1 || s.h.CountsWrites && r.Writes != 0 {
			t.Errorf("err %v, writes %d, connected %v, backend requests %d; want an error, nothing written, after connecting",
				r.Err, r.Writes, r.Connected, b.Requests())
		}
	})
}

func (s suite) halfWritten(t *testing.T) {
	for _, resend := range []bool{false, true} {
		t.Run(fmt.Sprintf("with Resend %v", resend), func(t *testing.T) {
			b := NewRawBackend(t, func(c *RawConn, n int) bool { return c.Answer(whoAnswer(c)) })
			var fail atomic.Bool
			fail.Store(true)
			c := s.client(t, Options{Addr: b.Addr(), Dial: FailingDial(&fail, 20)})
			r := send(t, t.Context(), c, request(t, b, "POST", strings.Repeat("x", 100), "A", nil), resend, 0)
			if r.Err == nil || b.Received("A") != 0 || r.Writes > 1 || s.h.CountsWrites && r.Writes != 0 {
				t.Errorf("err %v, writes %d, the backend read it %d times; want an error, not written whole",
					r.Err, r.Writes, b.Received("A"))
			}
		})
	}
}

func (s suite) earlyAnswer(t *testing.T) {
	b := NewRawBackendHeadersOnly(t, func(c *RawConn, n int) bool {
		// Refused on its header: the answer goes out, then the body is
		// read and dropped, so the close is a clean one.
		c.Answer("HTTP/1.1 413 Content Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
		_, _ = io.Copy(io.Discard, c.Req.Body)
		return false
	})
	c := s.client(t, Options{Addr: b.Addr()})
	r := send(t, t.Context(), c, request(t, b, "POST", strings.Repeat("x", 1000), "A", nil), false, 0)
	if r.Err != nil || r.Status != http.StatusRequestEntityTooLarge || r.Resent() {
		t.Errorf("status %d, err %v, writes %d; want the 413, sent once", r.Status, r.Err, r.Writes)
	}
}

func (s suite) contextEnd(t *testing.T) {
	hang := make(chan struct{})
	b := NewRawBackend(t, func(c *RawConn, n int) bool {
		<-hang
		return false
	})
	defer close(hang)
	c := s.client(t, Options{Addr: b.Addr()})

	t.Run("the deadline, after the write", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		r := send(t, ctx, c, request(t, b, "GET", "", "", nil), true, 0)
		if r.Err == nil || !upstream.TimedOut(r.Err) || r.Writes != 1 {
			t.Errorf("err %v, writes %d; want a timeout after the write", r.Err, r.Writes)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("the request ran %v past a 50ms deadline", took)
		}
	})
	t.Run("a cancellation", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(20*time.Millisecond, cancel)
		r := send(t, ctx, c, request(t, b, "GET", "", "", nil), true, 0)
		if r.Err == nil || ctx.Err() == nil {
			t.Errorf("err %v", r.Err)
		}
	})
	t.Run("a context that ended before the request", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		r := send(t, ctx, c, request(t, b, "GET", "", "", nil), true, 0)
		if !errors.Is(r.Err, context.Canceled) || r.Connected || r.Writes != 0 {
			t.Errorf("err %v, connected %v, writes %d; want canceled before connecting", r.Err, r.Connected, r.Writes)
		}
	})
}

func (s suite) idlePool(t *testing.T) {
	b := NewRawBackend(t, func(c *RawConn, n int) bool { return c.Answer(okAnswer) })
	c := s.client(t, Options{Addr: b.Addr(), MaxIdle: 4, IdleTimeout: 50 * time.Millisecond})
	// Six requests at once take up to six connections; at most four are
	// kept once they are done.
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 6 {
		wg.Go(func() {
			<-start
			r := new(upstream.Report)
			c.Send(context.Background(), request(t, b, "GET", "", "", nil), upstream.SendOptions{MaxBody: 1 << 20, Resend: true}, r)
			if r.Err != nil {
				t.Error(r.Err)
			}
			r.Release()
		})
	}
	close(start)
	wg.Wait()
	eventually(t, "at most four connections to stay open", func() bool { return b.Open() <= 4 })
	eventually(t, "the idle connections to close after their idle timeout", func() bool { return b.Open() == 0 })
}
