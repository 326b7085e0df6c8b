package proxy

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/toolgate/toolgate/examples"
)

// BenchmarkMCPCall is one search call as an MCP tools/call through
// Core.Handler in process (POST /mcp, stateless, no initialize first),
// against a canned backend answer: the MCP front's cost around the core,
// to compare with BenchmarkAgentHandler's POST /v1/tools.
func BenchmarkMCPCall(b *testing.B) {
	h := benchCore(b, cannedTransport{body: searchAnswer()}).Handler()
	ctx := loopbackContext()
	for _, rev := range []string{"", "2025-06-18", "2026-07-28"} {
		name := rev
		if name == "" {
			name = "no-version"
		}
		b.Run(name, func(b *testing.B) {
			body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_articles","arguments":{"q":"go","limit":5}}}`)
			if rev >= "2026-07-28" {
				body = []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
					`"io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"bench","version":"1"}},` +
					`"name":"search_articles","arguments":{"q":"go","limit":5}}}`)
			}
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:8080/mcp", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				if rev != "" {
					req.Header.Set("Mcp-Protocol-Version", rev)
				}
				if rev >= "2026-07-28" {
					req.Header.Set("Mcp-Method", "tools/call")
					req.Header.Set("Mcp-Name", "search_articles")
				}
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK || !bytes.Contains(w.Body.Bytes(), []byte(`"status":"ok"`)) {
					b.Fatalf("HTTP %d: %s", w.Code, w.Body)
				}
			}
		})
	}
}

// searchAnswer is the example search backend's answer to q=go&limit=5.
func searchAnswer() []byte {
	rec := httptest.NewRecorder()
	examples.NewSearchBackend(examples.SearchOptions{}).ServeHTTP(rec, httptest.NewRequest("GET", "/api/search?q=go&limit=5", nil))
	return rec.Body.Bytes()
}

// loopbackContext is the context of a request an agent sends to the agent
// port on loopback (the browser checks read the local address).
func loopbackContext() context.Context {
	return context.WithValue(context.Background(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080})
}
