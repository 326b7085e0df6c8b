package mcpfront

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy"
)

// BenchmarkMCPCall is one search call as an MCP tools/call through the
// agent port's handler in process (POST /mcp, stateless, no initialize first),
// against a canned backend answer: the MCP front's cost around the core,
// to compare with BenchmarkAgentHandler's POST /v1/tools.
func BenchmarkMCPCall(b *testing.B) {
	core := benchCore(b, proxytest.CannedTransport{Body: proxytest.SearchAnswer()})
	h := core.Handler(Front(core, Options{}))
	ctx := proxytest.LoopbackContext()
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

// benchCore is a core of the example policy whose backends are rt, closed
// with the benchmark.
func benchCore(b *testing.B, rt http.RoundTripper) *proxy.Core {
	b.Helper()
	doc := strings.NewReplacer("127.0.0.1:8080", "127.0.0.1:0", "127.0.0.1:9090", "127.0.0.1:1").Replace(string(examples.Policy()))
	snap, err := config.CompileSource("policy.yaml", []byte(doc), config.Options{})
	if err != nil {
		b.Fatal(err)
	}
	core, err := proxy.NewCore(snap, proxy.Options{Registry: prometheus.NewRegistry(), Transport: func(*policy.Upstream) http.RoundTripper { return rt }})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(core.Close)
	return core
}
