package clienttest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// RawBackend is a TCP server whose handler sees each connection and the
// number of the request on it, so a test can answer, close or reset at
// exactly the point it means to.
type RawBackend struct {
	ln       net.Listener
	conns    atomic.Int64 // connections accepted
	ended    atomic.Int64 // connections whose serving ended
	requests atomic.Int64 // requests read whole
	serve    func(c *RawConn, n int) bool
	wg       sync.WaitGroup

	mu   sync.Mutex
	seen map[string]int // requests read whole, by X-Request-Id
}

// RawConn is one server-side connection.
type RawConn struct {
	net.Conn
	br *bufio.Reader
	// Req is the request being served, its body read whole.
	Req *http.Request
}

// NewRawBackend starts a backend on a loopback port; it stops with the
// test. serve answers the n-th request (from 1) on a connection, read
// whole, and says whether to keep reading the connection.
func NewRawBackend(t testing.TB, serve func(c *RawConn, n int) bool) *RawBackend {
	t.Helper()
	return newRawBackend(t, serve, true)
}

// NewRawBackendHeadersOnly is NewRawBackend whose serve is called once a
// request's header is read, before its body: c.Req.Body is the body still
// on the wire, for serve to read or not.
func NewRawBackendHeadersOnly(t testing.TB, serve func(c *RawConn, n int) bool) *RawBackend {
	t.Helper()
	return newRawBackend(t, serve, false)
}

func newRawBackend(t testing.TB, serve func(c *RawConn, n int) bool, readBody bool) *RawBackend {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &RawBackend{ln: ln, serve: serve, seen: map[string]int{}}
	b.wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			b.conns.Add(1)
			b.wg.Go(func() {
				defer b.ended.Add(1)
				defer nc.Close()
				c := &RawConn{Conn: nc, br: bufio.NewReader(nc)}
				for n := 1; ; n++ {
					req, err := http.ReadRequest(c.br)
					if err != nil {
						return
					}
					if readBody {
						if _, err := io.Copy(io.Discard, req.Body); err != nil {
							return
						}
						b.count(req)
					}
					c.Req = req
					if !b.serve(c, n) {
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

func (b *RawBackend) count(req *http.Request) {
	b.requests.Add(1)
	b.mu.Lock()
	b.seen[req.Header.Get("X-Request-Id")]++
	b.mu.Unlock()
}

// Addr is the backend's host:port.
func (b *RawBackend) Addr() string { return b.ln.Addr().String() }

// URL is the backend's http:// URL.
func (b *RawBackend) URL() string { return "http://" + b.Addr() }

// Conns is the number of connections accepted.
func (b *RawBackend) Conns() int64 { return b.conns.Load() }

// Open is the number of connections being served: accepted, and neither
// closed by the client nor let go by serve.
func (b *RawBackend) Open() int64 { return b.conns.Load() - b.ended.Load() }

// Requests is the number of requests read whole.
func (b *RawBackend) Requests() int64 { return b.requests.Load() }

// Received says how many requests with X-Request-Id id the backend read
// whole: for a side effect, how many times it acted.
func (b *RawBackend) Received(id string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seen[id]
}

// Answer writes s on the connection; false when it could not.
func (c *RawConn) Answer(s string) bool {
	_, err := io.WriteString(c, s)
	return err == nil
}

// Reset closes the connection with a RST instead of a FIN.
func (c *RawConn) Reset() {
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

// FailingWriteConn fails one write when Fail is set, as a socket does once
// the backend's reset has arrived: with After zero it writes nothing, and
// otherwise After bytes of it first (a request cut off midway). Its socket
// stays reachable for a check before reuse.
type FailingWriteConn struct {
	*net.TCPConn
	Fail  *atomic.Bool
	After int
}

// Write writes p, or fails as the type says.
func (c *FailingWriteConn) Write(p []byte) (int, error) {
	if c.Fail.CompareAndSwap(true, false) {
		n := 0
		if c.After > 0 {
			n, _ = c.TCPConn.Write(p[:min(c.After, len(p))])
		}
		return n, syscall.EPIPE
	}
	return c.TCPConn.Write(p)
}

// FailingDial dials TCP connections, each a FailingWriteConn that fails a
// write when fail is set, after after bytes.
func FailingDial(fail *atomic.Bool, after int) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &FailingWriteConn{TCPConn: nc.(*net.TCPConn), Fail: fail, After: after}, nil
	}
}

// JSONAnswer is an answer of code with body.
func JSONAnswer(code int, body string) string {
	return fmt.Sprintf("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		code, http.StatusText(code), len(body), body)
}

// StreamHeaderBomb writes an answer whose header never ends, up to 256 MiB,
// until the reader goes away.
func StreamHeaderBomb(w io.Writer) {
	if _, err := io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Bomb: "); err != nil {
		return
	}
	chunk := []byte(strings.Repeat("a", 64<<10))
	for sent := 0; sent < 256<<20; sent += len(chunk) {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

// ManyFields is an answer of 150 small header fields: under the byte bound,
// over the count.
func ManyFields() string {
	var b strings.Builder
	b.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n")
	for i := range 150 {
		fmt.Fprintf(&b, "X-F%d: v\r\n", i)
	}
	b.WriteString("\r\n{}")
	return b.String()
}
