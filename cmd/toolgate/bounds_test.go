package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
)

// slowBody is a connection that sends a tool call's headers and part of
// its body, then never the rest.
type slowBody struct {
	conn   net.Conn
	br     *bufio.Reader
	closed chan struct{} // closed when the server ended the exchange
	answer atomic.Value  // the status line the server answered, if any
}

// openSlowBody sends the headers with Expect: 100-continue and waits for
// the server's 100 Continue: the server has accepted the connection and a
// handler is reading the body. Then it sends part of the body and keeps
// dripping a byte now and then, never finishing it.
func openSlowBody(t *testing.T, addr string) *slowBody {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	sb := &slowBody{conn: conn, br: bufio.NewReader(conn), closed: make(chan struct{})}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "POST /v1/tools/search_articles HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 40\r\nExpect: 100-continue\r\n\r\n")
	line, err := sb.br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("waiting for 100 Continue: %q %v", line, err)
	}
	if _, err := sb.br.ReadString('\n'); err != nil { // the blank line after it
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, `{"q":"g`); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(sb.closed)
		resp, err := http.ReadResponse(sb.br, nil)
		if err == nil {
			sb.answer.Store(resp.Status)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			_, err = sb.br.ReadByte() // then the connection closes
		}
		_ = err
	}()
	go func() {
		// A byte every 300ms, five at most: the body stays incomplete.
		for range 5 {
			select {
			case <-sb.closed:
				return
			case <-time.After(300 * time.Millisecond):
			}
			_, _ = conn.Write([]byte("o"))
		}
	}()
	return sb
}

func (sb *slowBody) isClosed() bool {
	select {
	case <-sb.closed:
		return true
	default:
		return false
	}
}

// TestSlowBodiesAgainstTheConnectionCap fills the agent port's connection
// cap with calls whose bodies never finish. The admin port still answers;
// each slow body is cut once read_timeout passes, its call never runs;
// and a good caller who came while the port was full gets its answer
// within its own deadline once a slot frees.
func TestSlowBodiesAgainstTheConnectionCap(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 4s read timeout")
	}
	const maxConns = 4
	const readTimeout = 4 * time.Second
	s := startHostile(t, hostileOptions{server: fmt.Sprintf("  max_connections: %d\n  read_timeout: %v\n", maxConns, readTimeout)})
	start := time.Now()
	var slow []*slowBody
	for range maxConns {
		slow = append(slow, openSlowBody(t, s.frontAddr()))
	}
	// Every slot is taken by a handler waiting for its body.
	client := &http.Client{Timeout: 3 * time.Second}
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		resp, err := client.Get(s.adminURL + path)
		if err != nil {
			t.Fatalf("admin %s while the agent port is full: %v", path, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("admin %s while the agent port is full: HTTP %d", path, resp.StatusCode)
		}
	}
	for i, sb := range slow {
		if sb.isClosed() {
			t.Fatalf("slow body %d was cut after %v, before the admin checks ended; read_timeout is %v", i, time.Since(start), readTimeout)
		}
	}

	// A good caller arrives while the port is full: its connection waits
	// in the accept queue until a slow body is cut.
	good := make(chan error, 1)
	go func() {
		c := &http.Client{Transport: &http.Transport{}, Timeout: 20 * time.Second}
		defer c.CloseIdleConnections()
		good <- politeCall(c, s.agentURL)
	}()

	for i, sb := range slow {
		select {
		case <-sb.closed:
		case <-time.After(readTimeout + 15*time.Second):
			t.Fatalf("slow body %d was never cut", i)
		}
		if status, _ := sb.answer.Load().(string); status != "" && !strings.HasPrefix(status, "400") {
			t.Errorf("slow body %d answered %s, want 400 (an incomplete body) or a closed connection", i, status)
		}
	}
	if took := time.Since(start); took < readTimeout {
		t.Errorf("the slow bodies were cut after %v, before read_timeout %v", took, readTimeout)
	}
	if err := <-good; err != nil {
		t.Errorf("the good caller: %v", err)
	}
	if n := s.searches.Load(); n != 1 {
		t.Errorf("the backend received %d searches, want 1 (the good caller's): a call ran on part of its body", n)
	}
}

// TestLongToolCallOutlivesServerTimeouts: read and write timeouts bound how
// a request arrives and an answer leaves, never the call in between.
func TestLongToolCallOutlivesServerTimeouts(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a 3s backend answer")
	}
	s := startHostile(t, hostileOptions{
		server:  "  read_timeout: 500ms\n  write_timeout: 500ms\n  idle_timeout: 500ms\n",
		timeout: 20 * time.Second,
	})
	client := &http.Client{Timeout: 30 * time.Second}
	// The search backend takes DefaultSlowDelay (3s) to answer this query.
	resp, err := client.Post(s.agentURL+"/v1/tools/search_articles", "application/json", strings.NewReader(`{"q":"`+examples.QuerySlow+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	env, raw, err := proxytest.ReadEnvelope(resp)
	if err != nil || !env.Status.Success() {
		t.Fatalf("a 3s call with 500ms server timeouts: HTTP %d %v %s", resp.StatusCode, err, raw)
	}
}

// TestIdleConnectionsAreClosed: a keep-alive connection left idle is closed
// after idle_timeout, freeing its slot.
func TestIdleConnectionsAreClosed(t *testing.T) {
	s := startHostile(t, hostileOptions{server: "  idle_timeout: 1s\n"})
	conn, err := net.DialTimeout("tcp", s.frontAddr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "POST /v1/tools/search_articles HTTP/1.1\r\nHost: localhost\r\nContent-Length: 10\r\n\r\n{\"q\":\"go\"}")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("HTTP %d, close %v: want a kept-alive answer", resp.StatusCode, resp.Close)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("the idle connection was not closed: %v", err)
	}
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && !ne.Timeout()
}

// TestBoundedHandlerKeepsResponseFeatures: the deadline wrapper still lets
// a handler flush (passthrough streaming) and reach the connection through
// http.ResponseController.
func TestBoundedHandlerKeepsResponseFeatures(t *testing.T) {
	var mu sync.Mutex
	var errs []error
	h := boundedHandler{readTimeout: time.Second, writeTimeout: time.Second, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		record := func(err error) {
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}
		_, _ = io.WriteString(w, "a")
		record(rc.Flush())
		w.(http.Flusher).Flush()
		record(rc.SetWriteDeadline(time.Now().Add(time.Second)))
		_, _ = io.WriteString(w, "b")
	})}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	resp, err := http.Get("http://" + ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ab" || len(resp.TransferEncoding) == 0 {
		t.Errorf("body %q, transfer encoding %v: want a flushed, chunked answer", body, resp.TransferEncoding)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 {
		t.Errorf("response controller: %v", errs)
	}
}

// BenchmarkBoundedHandler measures what the deadlines cost per request on a
// kept-alive loopback connection, against the bare handler.
func BenchmarkBoundedHandler(b *testing.B) {
	body := []byte(`{"status":"ok"}`)
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write(body)
	})
	for _, tc := range []struct {
		name string
		h    http.Handler
	}{
		{"bare", bare},
		{"bounded", boundedHandler{next: bare, readTimeout: 10 * time.Second, writeTimeout: 10 * time.Second}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := &http.Server{Handler: tc.h, ReadHeaderTimeout: 10 * time.Second}
			go func() { _ = srv.Serve(ln) }()
			defer srv.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			defer client.CloseIdleConnections()
			url := "http://" + ln.Addr().String() + "/"
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.Post(url, "application/json", strings.NewReader(`{"q":"go"}`))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}

// connWriter is a ResponseWriter whose deadlines are a real loopback
// connection's, for BenchmarkBoundedWrapper.
type connWriter struct {
	h    http.Header
	conn net.Conn
}

func (w *connWriter) Header() http.Header                { return w.h }
func (w *connWriter) Write(p []byte) (int, error)        { return len(p), nil }
func (w *connWriter) WriteHeader(int)                    {}
func (w *connWriter) SetReadDeadline(t time.Time) error  { return w.conn.SetReadDeadline(t) }
func (w *connWriter) SetWriteDeadline(t time.Time) error { return w.conn.SetWriteDeadline(t) }
func (w *connWriter) FlushError() error                  { return nil }

// BenchmarkBoundedWrapper is boundedHandler's own cost per request (its
// deadlines on a real connection, its allocations), without HTTP.
func BenchmarkBoundedWrapper(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			_, _ = io.Copy(io.Discard, c)
		}
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	answer := []byte(`{"status":"ok"}`)
	h := boundedHandler{readTimeout: 10 * time.Second, writeTimeout: 10 * time.Second, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(answer)
	})}
	w := &connWriter{h: http.Header{}, conn: conn}
	r := httptestRequest(b)
	body := strings.NewReader(`{"q":"go"}`)
	b.ReportAllocs()
	for b.Loop() {
		body.Reset(`{"q":"go"}`)
		r.Body = io.NopCloser(body)
		h.ServeHTTP(w, r)
	}
}

func httptestRequest(b *testing.B) *http.Request {
	r, err := http.NewRequest("POST", "http://localhost/v1/tools/search_articles", nil)
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// TestBoundedWriterCutsAStalledReader: a client that stops reading is cut
// by the write deadline, while a write after a handler's own deadline has
// passed is armed again rather than failing on it.
func TestBoundedWriterCutsAStalledReader(t *testing.T) {
	cut := make(chan error, 1)
	h := boundedHandler{readTimeout: time.Second, writeTimeout: 300 * time.Millisecond, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/own-deadline" {
			rc := http.NewResponseController(w)
			_, _ = io.WriteString(w, "a")
			_ = rc.Flush()
			_ = rc.SetWriteDeadline(time.Now().Add(-time.Second))
			_, _ = io.WriteString(w, "b")
			return
		}
		chunk := make([]byte, 64<<10)
		for range 1024 { // 64 MiB, far more than the socket buffers hold
			if _, err := w.Write(chunk); err != nil {
				cut <- err
				return
			}
		}
		cut <- nil
	})}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Second}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	resp, err := http.Get("http://" + ln.Addr().String() + "/own-deadline")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ab" || err != nil {
		t.Errorf("after the handler's own deadline passed: %q %v, want ab", body, err)
	}

	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET /big HTTP/1.1\r\nHost: localhost\r\n\r\n") // and never read
	select {
	case err := <-cut:
		if !errors.Is(err, http.ErrHandlerTimeout) && !isTimeoutErr(err) {
			t.Errorf("writing to a client that stopped reading: %v, want a timeout", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a client that stopped reading was never cut")
	}
}

func isTimeoutErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
