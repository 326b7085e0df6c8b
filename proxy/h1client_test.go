package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/toolgate/toolgate/contracts"
)

const okAnswer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"

func h1Request(t *testing.T, method, body string, header http.Header) *http.Request {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://backend.test/x", rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	return req
}

func newTestH1Client(b *rawBackend) *h1Client {
	return newH1Client(b.ln.Addr().String(), 4)
}

// doH1 sends req as a read-only tool's call (a written request may be sent
// again).
func doH1(t *testing.T, c *h1Client, req *http.Request) exchange {
	t.Helper()
	return doH1Resend(t, c, req, true)
}

func doH1Resend(t *testing.T, c *h1Client, req *http.Request, resend bool) exchange {
	t.Helper()
	buf := make([]byte, 0, 64)
	return c.do(context.Background(), req, 1<<20, &buf, resend)
}

func TestH1ClientReusesConnections(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // after the backend stops
	chunked := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
	b := newRawBackend(t, func(c *rawConn, n int) bool {
		if n%2 == 0 {
			return c.answer(chunked)
		}
		return c.answer(okAnswer)
	})
	c := newTestH1Client(b)
	defer c.CloseIdleConnections()
	for i := range 6 {
		ex := doH1(t, c, h1Request(t, "GET", "", nil))
		if ex.err != nil || ex.readErr != nil {
			t.Fatalf("call %d: %v %v", i, ex.err, ex.readErr)
		}
		want := `{"ok":true}`
		if i%2 == 1 {
			want = "hello"
		}
		if string(ex.body) != want || ex.writes != 1 || !ex.gotConn {
			t.Fatalf("call %d: body %q writes %d", i, ex.body, ex.writes)
		}
	}
	if got := b.conns.Load(); got != 1 {
		t.Errorf("connections = %d, want 1 (kept alive)", got)
	}
}

func TestH1ClientDoesNotReuse(t *testing.T) {
	tests := []struct {
		name   string
		answer string
		max    int64
	}{
		{"an answer that says Connection: close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}", 1 << 20},
		{"a body over the limit", okAnswer, 4},
		{"an answer followed by stray bytes", okAnswer + "garbage", 1 << 20},
		{"a 1.0 answer without a length", "HTTP/1.0 200 OK\r\n\r\n{}", 1 << 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newRawBackend(t, func(c *rawConn, n int) bool {
				c.answer(tt.answer)
				return !strings.HasPrefix(tt.answer, "HTTP/1.0")
			})
			c := newTestH1Client(b)
			defer c.CloseIdleConnections()
			for range 2 {
				buf := make([]byte, 0, 64)
				ex := c.do(context.Background(), h1Request(t, "GET", "", nil), tt.max, &buf, true)
				if ex.err != nil || ex.resp.StatusCode != 200 {
					t.Fatalf("exchange: %+v", ex)
				}
			}
			if got := b.conns.Load(); got != 2 {
				t.Errorf("connections = %d, want 2 (none reused)", got)
			}
		})
	}
}

func TestH1ClientSkipsInformationalAnswers(t *testing.T) {
	b := newRawBackend(t, func(c *rawConn, n int) bool {
		return c.answer("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n" + okAnswer)
	})
	c := newTestH1Client(b)
	defer c.CloseIdleConnections()
	ex := doH1(t, c, h1Request(t, "POST", `{"a":1}`, nil))
	if ex.err != nil || ex.resp.StatusCode != 200 || string(ex.body) != `{"ok":true}` {
		t.Fatalf("exchange: %+v", ex)
	}

	endless := newRawBackend(t, func(c *rawConn, n int) bool {
		return c.answer(strings.Repeat("HTTP/1.1 102 Processing\r\n\r\n", 10))
	})
	c2 := newTestH1Client(endless)
	defer c2.CloseIdleConnections()
	if ex := doH1(t, c2, h1Request(t, "GET", "", nil)); ex.err == nil || ex.writes != 1 {
		t.Errorf("ten informational answers: %+v, want an error after the write", ex)
	}
}

// TestH1ClientClosedIdleConnection: a backend that closed an idle
// connection (its keep-alive timeout) must not cost a side-effecting call:
// the connection is found closed before it is used.
func TestH1ClientClosedIdleConnection(t *testing.T) {
	closed := make(chan struct{})
	var once atomic.Bool
	b := newRawBackend(t, func(c *rawConn, n int) bool {
		c.answer(okAnswer)
		if once.CompareAndSwap(false, true) {
			c.Close()
			closed <- struct{}{}
			return false
		}
		return true
	})
	c := newTestH1Client(b)
	defer c.CloseIdleConnections()
	if ex := doH1(t, c, h1Request(t, "POST", `{"n":1}`, nil)); ex.err != nil {
		t.Fatal(ex.err)
	}
	<-closed
	ex := doH1(t, c, h1Request(t, "POST", `{"n":2}`, nil))
	if ex.err != nil || ex.writes != 1 {
		t.Fatalf("second call: err %v writes %d", ex.err, ex.writes)
	}
	if got := b.requests.Load(); got != 2 {
		t.Errorf("backend read %d requests, want 2", got)
	}
}

// TestH1ClientResend pins when a request written whole is sent again after
// its reused connection failed: when the caller says acting twice is
// harmless (a read-only tool, a backend that dedupes), whatever the method
// and headers, and only before any byte of an answer.
func TestH1ClientResend(t *testing.T) {
	tests := []struct {
		name       string
		method     string
		body       string
		header     http.Header
		resend     bool
		broken     func(c *rawConn) // what the backend does with request 2 on the first connection
		wantErr    bool
		wantWrites int
	}{
		{
			name: "a read-only GET that met a connection closed on arrival is sent again", method: "GET", resend: true,
			broken: func(c *rawConn) { c.Close() }, wantWrites: 2,
		},
		{
			name: "a side-effecting GET that met a connection closed on arrival is not", method: "GET",
			broken: func(c *rawConn) { c.Close() }, wantErr: true, wantWrites: 1,
		},
		{
			name: "a side-effecting POST that met a connection closed on arrival is not", method: "POST", body: `{"a":1}`,
			broken: func(c *rawConn) { c.Close() }, wantErr: true, wantWrites: 1,
		},
		{
			name: "a side-effecting POST with an Idempotency-Key header the backend does not dedupe on is not", method: "POST", body: `{"a":1}`,
			header: http.Header{"Idempotency-Key": {"k1"}},
			broken: func(c *rawConn) { c.Close() }, wantErr: true, wantWrites: 1,
		},
		{
			name: "a POST to a backend that dedupes on its key is", method: "POST", body: `{"a":1}`, resend: true,
			header: http.Header{"Idempotency-Key": {"k1"}},
			broken: func(c *rawConn) { c.Close() }, wantWrites: 2,
		},
		{
			name: "a side-effecting POST that met a connection reset on arrival is not", method: "POST", body: `{"a":1}`,
			broken: func(c *rawConn) { c.reset() }, wantErr: true, wantWrites: 1,
		},
		{
			name: "a request whose answer broke off is not, even read-only", method: "GET", resend: true,
			broken: func(c *rawConn) { c.answer("HTTP/1.1 200 OK\r\nContent-Len"); c.Close() }, wantErr: true, wantWrites: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var first atomic.Bool
			b := newRawBackend(t, func(c *rawConn, n int) bool {
				if n == 2 && first.CompareAndSwap(false, true) {
					tt.broken(c)
					return false
				}
				return c.answer(okAnswer)
			})
			c := newTestH1Client(b)
			defer c.CloseIdleConnections()
			if ex := doH1Resend(t, c, h1Request(t, tt.method, tt.body, tt.header), tt.resend); ex.err != nil {
				t.Fatal(ex.err)
			}
			// The connection is open when it is checked; the backend closes
			// it once the request arrived.
			ex := doH1Resend(t, c, h1Request(t, tt.method, tt.body, tt.header), tt.resend)
			if (ex.err != nil) != tt.wantErr || ex.writes != tt.wantWrites {
				t.Errorf("err %v writes %d, want error %v writes %d", ex.err, ex.writes, tt.wantErr, tt.wantWrites)
			}
		})
	}
}

// TestH1ClientResendsWhenNothingWasWritten: a reused connection whose
// write fails before a byte of the request went out (the backend's reset
// arrived after the check) carried nothing; even a side-effecting POST is
// sent again, once, on a new connection.
func TestH1ClientResendsWhenNothingWasWritten(t *testing.T) {
	b := newRawBackend(t, func(c *rawConn, n int) bool { return c.answer(okAnswer) })
	c := newTestH1Client(b)
	var failNext atomic.Bool
	dial := c.dial
	c.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &failingWriteConn{TCPConn: nc.(*net.TCPConn), fail: &failNext}, nil
	}
	defer c.CloseIdleConnections()
	if ex := doH1Resend(t, c, h1Request(t, "POST", `{"a":1}`, nil), false); ex.err != nil {
		t.Fatal(ex.err)
	}
	failNext.Store(true)
	ex := doH1Resend(t, c, h1Request(t, "POST", `{"a":1}`, nil), false)
	if ex.err != nil || ex.writes != 1 {
		t.Fatalf("err %v writes %d, want a clean resend", ex.err, ex.writes)
	}
	if got, conns := b.requests.Load(), b.conns.Load(); got != 2 || conns != 2 {
		t.Errorf("backend read %d requests on %d connections, want 2 on 2", got, conns)
	}
}

func TestH1ClientDeadlineAndCancel(t *testing.T) {
	hang := make(chan struct{})
	b := newRawBackend(t, func(c *rawConn, n int) bool {
		<-hang
		return false
	})
	defer close(hang)
	c := newTestH1Client(b)
	defer c.CloseIdleConnections()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	buf := make([]byte, 0, 64)
	ex := c.do(ctx, h1Request(t, "GET", "", nil), 1<<20, &buf, true)
	if ex.err == nil || !isTimeout(ex.err) || ex.writes != 1 {
		t.Errorf("deadline: err %v writes %d, want a timeout after the write", ex.err, ex.writes)
	}

	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	ex = c.do(ctx, h1Request(t, "GET", "", nil), 1<<20, &buf, true)
	if ex.err == nil || ctx.Err() == nil {
		t.Errorf("cancel: err %v", ex.err)
	}

	ex = c.do(ctx, h1Request(t, "GET", "", nil), 1<<20, &buf, true)
	if !errors.Is(ex.err, context.Canceled) || ex.gotConn {
		t.Errorf("already cancelled: %+v, want no connection", ex)
	}
}

func TestH1ClientIdlePool(t *testing.T) {
	b := newRawBackend(t, func(c *rawConn, n int) bool { return c.answer(okAnswer) })
	c := newTestH1Client(b)
	c.idleTimeout = 20 * time.Millisecond
	// Six calls at once need six connections; four stay idle after.
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 6 {
		wg.Go(func() {
			<-start
			if ex := doH1(t, c, h1Request(t, "GET", "", nil)); ex.err != nil {
				t.Error(ex.err)
			}
		})
	}
	close(start)
	wg.Wait()
	c.mu.Lock()
	n := len(c.idle)
	c.mu.Unlock()
	if n > 4 {
		t.Errorf("%d idle connections, want at most 4", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c.mu.Lock()
		n, armed := len(c.idle), c.sweep != nil
		c.mu.Unlock()
		if n == 0 && !armed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d idle connections left after their idle timeout", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWriteRequest: what writeRequest writes reads back as the request it
// was, and no header value can end its line.
func TestWriteRequest(t *testing.T) {
	tests := []struct {
		name, method, uri, body string
		header                  http.Header
		wantLength              string
	}{
		{name: "a GET with a query", method: "GET", uri: "/api/search?q=go&limit=5", header: http.Header{"Accept": {"application/json"}}},
		{name: "a POST with a body", method: "POST", uri: "/v1/users/a%2Fb/notifications", body: `{"text":"hi"}`, wantLength: "13",
			header: http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {"k1"}}},
		{name: "a POST without a body", method: "POST", uri: "/x", wantLength: "0"},
		{name: "a DELETE", method: "DELETE", uri: "/x/1"},
		{name: "a value that tries to add a header", method: "GET", uri: "/x",
			header: http.Header{"Traceparent": {"00-abc\r\nX-Injected: 1"}, "X-Multi": {"a", "b"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse("http://backend:7001")
			if err != nil {
				t.Fatal(err)
			}
			u.Opaque = strings.SplitN(tt.uri, "?", 2)[0]
			if _, q, ok := strings.Cut(tt.uri, "?"); ok {
				u.RawQuery = q
			}
			req := &http.Request{Method: tt.method, URL: u, Host: u.Host, Header: http.Header{"User-Agent": {"toolgate/test"}}}
			for k, v := range tt.header {
				req.Header[k] = v
			}
			if tt.body != "" {
				req.Body = io.NopCloser(strings.NewReader(tt.body))
				req.ContentLength = int64(len(tt.body))
			}
			var out strings.Builder
			w := bufio.NewWriter(&out)
			if err := writeRequest(w, req); err != nil {
				t.Fatal(err)
			}
			w.Flush()
			got, err := http.ReadRequest(bufio.NewReader(strings.NewReader(out.String())))
			if err != nil {
				t.Fatalf("%v in %q", err, out.String())
			}
			body, _ := io.ReadAll(got.Body)
			if got.Method != tt.method || got.RequestURI != tt.uri || got.Host != "backend:7001" || string(body) != tt.body {
				t.Errorf("read back %s %s host %s body %q from %q", got.Method, got.RequestURI, got.Host, body, out.String())
			}
			if l := got.Header.Get("Content-Length"); l != tt.wantLength {
				t.Errorf("Content-Length %q, want %q", l, tt.wantLength)
			}
			if got.Header.Get("X-Injected") != "" {
				t.Errorf("a value added a header: %q", out.String())
			}
			for k, v := range req.Header {
				want := make([]string, len(v))
				for i, s := range v {
					want[i] = strings.ReplaceAll(s, "\r\n", "  ")
				}
				if g := got.Header.Values(k); strings.Join(g, ",") != strings.Join(want, ",") {
					t.Errorf("header %s = %q, want %q", k, g, want)
				}
			}
		})
	}
}

// TestCallerGoneStopsTheBackendCall: an agent that goes away while the
// backend works stops the exchange at once (not at the tool's deadline),
// and the envelope says what is known: nothing for a read, an unknown
// effect for a write that reached the backend.
func TestCallerGoneStopsTheBackendCall(t *testing.T) {
	tests := []struct {
		tool       string
		wantEffect contracts.SideEffect
		wantRetry  bool
	}{
		{"read", contracts.SideEffectNone, true},
		{"write", contracts.SideEffectUnknown, false},
	}
	for _, tt := range tests {
		t.Run(tt.tool, func(t *testing.T) {
			h := newHarness(t, strings.Replace(harnessPolicy, "timeout: 300ms", "timeout: 1h", 1))
			ctx := h.leaveOnceCalled()
			req := &Request{Tool: tt.tool, Body: []byte(`{"mode":"hang"}`), IdempotencyKey: "k-gone", Front: "http"}
			res := h.core.Call(ctx, req)
			env := res.Envelope
			if res.Reason != contracts.ReasonCanceled || env.Status != contracts.StatusUpstream ||
				env.SideEffect != tt.wantEffect || env.Retryable != tt.wantRetry {
				t.Errorf("reason %s, envelope %+v; want canceled, upstream, side_effect %s, retryable %v",
					res.Reason, env, tt.wantEffect, tt.wantRetry)
			}
		})
	}
}

// BenchmarkH1ConnAlive is the check every pooled connection gets before
// reuse, on a quiet loopback connection: what the check adds to a call.
func BenchmarkH1ConnAlive(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	pc := &h1Conn{nc: nc}
	b.ReportAllocs()
	for b.Loop() {
		if !pc.alive() {
			b.Fatal("a quiet connection is not alive")
		}
	}
}

// do is exchange with the exchange returned, for the tests.
func (c *h1Client) do(ctx context.Context, req *http.Request, maxBody int64, buf *[]byte, resend bool) exchange {
	var ex exchange
	c.exchange(ctx, req, maxBody, buf, resend, &ex)
	return ex
}
