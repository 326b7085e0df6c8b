package upstream

import (
	"bufio"
	"context"
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
)

// The H1Client's wire behaviour is the client conformance suite's
// (conformance_test.go); these tests hold what is its own: no goroutine
// per connection, the idle sweep, the request writer, the check before
// reuse.

const okAnswer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}"

func h1Request(t *testing.T, addr string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// testBackend answers the same to every request, keeping connections
// open; it counts them, and the requests it read whole. (The conformance
// suite's backend imports this package, so this package's own tests keep
// a small one.)
type testBackend struct {
	ln       net.Listener
	conns    atomic.Int64
	requests atomic.Int64
	wg       sync.WaitGroup
}

func newTestBackend(t *testing.T, answer string) *testBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &testBackend{ln: ln}
	b.wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			b.conns.Add(1)
			b.wg.Go(func() {
				defer nc.Close()
				br := bufio.NewReader(nc)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					b.requests.Add(1)
					if _, err := io.WriteString(nc, answer); err != nil {
						return
					}
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		b.wg.Wait()
	})
	return b
}

func (b *testBackend) Addr() string { return b.ln.Addr().String() }

// send sends a read-only request.
func send(c *H1Client, req *http.Request) *Report {
	r := new(Report)
	c.Send(context.Background(), req, SendOptions{MaxBody: 1 << 20, Resend: true}, r)
	r.Release()
	return r
}

// TestH1ClientRunsNoGoroutine: the client reads and writes on the caller's
// goroutine, and a kept-alive connection costs none either.
func TestH1ClientRunsNoGoroutine(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) }) // after the backend stops
	b := newTestBackend(t, okAnswer)
	c := NewH1Client(H1Options{Addr: b.Addr(), MaxIdle: 4})
	defer c.CloseIdleConnections()
	for i := range 6 {
		if r := send(c, h1Request(t, b.Addr())); r.Err != nil || r.Status != 200 {
			t.Fatalf("request %d: %d %v", i, r.Status, r.Err)
		}
	}
	if got := b.conns.Load(); got != 1 {
		t.Errorf("connections = %d, want 1 (kept alive)", got)
	}
}

// TestH1ClientBoundsInformationalAnswers: more than five informational
// answers before the final one end the request, after the write.
func TestH1ClientBoundsInformationalAnswers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		if _, err := http.ReadRequest(bufio.NewReader(nc)); err == nil {
			_, _ = io.WriteString(nc, strings.Repeat("HTTP/1.1 102 Processing\r\n\r\n", 10))
		}
		_, _ = io.Copy(io.Discard, nc)
	}()
	c := NewH1Client(H1Options{Addr: ln.Addr().String(), MaxIdle: 4})
	defer c.CloseIdleConnections()
	if r := send(c, h1Request(t, ln.Addr().String())); r.Err == nil || r.Writes != 1 {
		t.Errorf("ten informational answers: status %d, err %v, writes %d; want an error after the write", r.Status, r.Err, r.Writes)
	}
}

// TestH1ClientIdlePool: the pool keeps at most MaxIdle connections, and
// its sweep closes them after the idle timeout and then stops.
func TestH1ClientIdlePool(t *testing.T) {
	b := newTestBackend(t, okAnswer)
	c := NewH1Client(H1Options{Addr: b.Addr(), MaxIdle: 4, IdleTimeout: 20 * time.Millisecond})
	// Six calls at once need six connections; four stay idle after.
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 6 {
		wg.Go(func() {
			<-start
			if r := send(c, h1Request(t, b.Addr())); r.Err != nil {
				t.Error(r.Err)
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

// TestWriteRequest: what WriteRequest writes reads back as the request it
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
			if err := WriteRequest(w, req); err != nil {
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

// namedCancellation is a context as the proxy's call context presents
// itself to the client: a deadline, and another context whose end, short
// of the deadline, ends it (Cancellation). Its own Done is nil, so only
// what Send takes from Deadline and EndsWith can stop a request.
type namedCancellation struct {
	context.Context // values only
	deadline        time.Time
	watch           context.Context
}

func (c namedCancellation) Deadline() (time.Time, bool) { return c.deadline, true }

func (c namedCancellation) EndsWith() context.Context { return c.watch }

// silentBackend reads requests and never answers; its connections close
// when the test ends.
func silentBackend(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, nc)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(io.Discard, nc) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, nc := range conns {
			nc.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// TestH1ClientTakesTheDeadlineFromTheContext: for a context that names
// its Cancellation, the connection's I/O stops at the context's deadline
// (set on the connection, with no timer or hook of the context's) and when
// the named context ends; the deadline is taken off before the connection
// is pooled, so a later call on it is not cut short.
func TestH1ClientTakesTheDeadlineFromTheContext(t *testing.T) {
	stops := []struct {
		name     string
		deadline time.Duration
		cancel   time.Duration // the named context ends after this; 0: never
	}{
		{"at the deadline", 100 * time.Millisecond, 0},
		{"when the named context ends", time.Hour, 100 * time.Millisecond},
	}
	for _, tt := range stops {
		t.Run("a silent backend's call stops "+tt.name, func(t *testing.T) {
			addr := silentBackend(t)
			c := NewH1Client(H1Options{Addr: addr, MaxIdle: 4})
			defer c.CloseIdleConnections()
			watch, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancel > 0 {
				time.AfterFunc(tt.cancel, cancel)
			}
			ctx := namedCancellation{Context: context.Background(), deadline: time.Now().Add(tt.deadline), watch: watch}
			done := make(chan *Report, 1)
			start := time.Now()
			go func() {
				r := new(Report)
				c.Send(ctx, h1Request(t, addr), SendOptions{MaxBody: 1 << 20}, r)
				done <- r
			}()
			select {
			case r := <-done:
				// Both stop the I/O with a deadline in the past: a
				// timeout, which the proxy tells apart by its context.
				if !TimedOut(r.Err) || r.Writes != 1 {
					t.Errorf("after %v: err %v, writes %d; want a timeout after the request went out", time.Since(start), r.Err, r.Writes)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the call did not stop")
			}
		})
	}
	t.Run("a pooled connection keeps no deadline", func(t *testing.T) {
		b := newTestBackend(t, okAnswer)
		c := NewH1Client(H1Options{Addr: b.Addr(), MaxIdle: 4})
		defer c.CloseIdleConnections()
		ctx := namedCancellation{Context: context.Background(), deadline: time.Now().Add(200 * time.Millisecond), watch: context.Background()}
		r := new(Report)
		c.Send(ctx, h1Request(t, b.Addr()), SendOptions{MaxBody: 1 << 20}, r)
		r.Release()
		if r.Err != nil || r.Status != 200 {
			t.Fatalf("first call: %d %v", r.Status, r.Err)
		}
		time.Sleep(300 * time.Millisecond)
		if r := send(c, h1Request(t, b.Addr())); r.Err != nil || r.Status != 200 {
			t.Fatalf("call past the first call's deadline: %d %v", r.Status, r.Err)
		}
		if got := b.conns.Load(); got != 1 {
			t.Errorf("connections = %d, want 1 (kept alive)", got)
		}
	})
}
