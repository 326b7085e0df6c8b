package proxy

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testkit/proxytest"

	"github.com/toolgate/toolgate/examples"
)

// BenchmarkAgentHandler is one search call through Core.Handler in process,
// as an agent on loopback sends it (Host, LocalAddr, JSON body): the
// routing, the browser checks and the front's work around the core,
// against a canned backend answer.
func BenchmarkAgentHandler(b *testing.B) {
	rec := httptest.NewRecorder()
	examples.NewSearchBackend(examples.SearchOptions{}).ServeHTTP(rec, httptest.NewRequest("GET", "/api/search?q=go&limit=5", nil))
	h := benchCore(b, proxytest.CannedTransport{Body: rec.Body.Bytes()}).Handler()
	body := []byte(`{"q":"go","limit":5}`)
	ctx := context.WithValue(context.Background(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080})
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:8080/v1/tools/search_articles", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("HTTP %d: %s", w.Code, w.Body)
		}
	}
}

// BenchmarkTransparentHandler is BenchmarkAgentHandler's call as a legacy
// client sends it in transparent mode (server.transparent: true): a GET of
// the tool's own route, its arguments read from the query.
func BenchmarkTransparentHandler(b *testing.B) {
	rec := httptest.NewRecorder()
	examples.NewSearchBackend(examples.SearchOptions{}).ServeHTTP(rec, httptest.NewRequest("GET", "/api/search?q=go&limit=5", nil))
	h := benchCoreOf(b, strings.Replace(string(examples.Policy()), "\nserver:\n", "\nserver:\n  transparent: true\n", 1), proxytest.CannedTransport{Body: rec.Body.Bytes()}).Handler()
	ctx := context.WithValue(context.Background(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080})
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:8080/api/search?q=go&limit=5", nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("HTTP %d: %s", w.Code, w.Body)
		}
	}
}
