package upstream

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestNoReplayWritesNoBody: the empty body that keeps net/http from
// resending a bodiless side-effecting request is written as no body at
// all: no Content-Length, no chunking, nothing after the header.
func TestNoReplayWritesNoBody(t *testing.T) {
	tests := []struct {
		method      string
		key         bool   // an Idempotency-Key header, which makes any method replayable to net/http
		wantLength  string // the Content-Length header, "" for none
		wantChunked bool
	}{
		{method: http.MethodGet, wantLength: ""},
		{method: http.MethodGet, key: true, wantLength: ""},
		{method: http.MethodHead, wantLength: ""},
		{method: http.MethodOptions, wantLength: ""},
		{method: http.MethodDelete, key: true, wantLength: ""},
		{method: http.MethodPost, wantLength: "0"}, // never replayable: untouched
		// The one shape that gets an empty chunked body: a bodiless POST
		// carrying an Idempotency-Key header (from the upstream's static
		// headers; a forwarded key means the backend dedupes, and then no
		// empty body is needed).
		{method: http.MethodPost, key: true, wantChunked: true},
	}
	b := newTestBackend(t, "HTTP/1.1 204 No Content\r\n\r\n")
	var raw syncBuffer
	rt := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		nc, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		return &recordingConn{Conn: nc, w: &raw}, err
	}}
	defer rt.CloseIdleConnections()
	for _, tt := range tests {
		name := tt.method + " without an Idempotency-Key header"
		if tt.key {
			name = tt.method + " with an Idempotency-Key header"
		}
		t.Run(name, func(t *testing.T) {
			before := b.requests.Load()
			req, _ := http.NewRequest(tt.method, "http://"+b.Addr()+"/x", nil)
			if tt.key {
				req.Header.Set("Idempotency-Key", "k")
			}
			noReplay(req)
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if b.requests.Load() != before+1 {
				t.Fatal("the backend did not read one whole request")
			}
			wire := raw.String()
			wire = wire[strings.LastIndex(wire, tt.method+" /x"):]
			head, rest, _ := strings.Cut(wire, "\r\n\r\n")
			if tt.wantChunked {
				if headerValue(head, "Transfer-Encoding") != "chunked" || rest != "0\r\n\r\n" {
					t.Errorf("%s written as %q, want an empty chunked body", tt.method, wire)
				}
			} else if headerValue(head, "Transfer-Encoding") != "" || rest != "" {
				t.Errorf("%s written as %q, want no body", tt.method, wire)
			}
			if got := headerValue(head, "Content-Length"); got != tt.wantLength {
				t.Errorf("Content-Length %q, want %q in %q", got, tt.wantLength, head)
			}
		})
	}
}

// recordingConn copies what is written to a connection.
type recordingConn struct {
	net.Conn
	w io.Writer
}

func (c *recordingConn) Write(p []byte) (int, error) {
	_, _ = c.w.Write(p)
	return c.Conn.Write(p)
}

func headerValue(head, name string) string {
	for _, line := range strings.Split(head, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, name) {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// syncBuffer is a buffer safe for a transport's concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
