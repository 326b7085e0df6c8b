package mcpfront_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/internal/testkit/mcptest"
	"github.com/toolgate/toolgate/proxy"
	"github.com/toolgate/toolgate/proxy/mcpfront"
)

// TestMCPMetaTraceparentReachesTheBackend: an MCP client without header
// control sends its trace context in _meta; toolgate continues it. An
// invalid one (CR LF in it, which the backend request must never carry)
// is dropped, never an error for the call.
func TestMCPMetaTraceparentReachesTheBackend(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	const headerTP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, tc := range []struct {
		name   string
		meta   mcp.Meta
		header string // the HTTP request's traceparent
		want   string // what the backend gets
	}{
		{"a valid _meta traceparent is forwarded", mcp.Meta{"traceparent": tp}, "", tp},
		{"_meta wins over the header", mcp.Meta{"traceparent": tp}, headerTP, tp},
		{"CR LF in _meta is not forwarded", mcp.Meta{"traceparent": tp + "\r\nX-Injected: 1"}, "", ""},
		{"an invalid _meta value leaves the header's", mcp.Meta{"traceparent": "garbage\r\n"}, headerTP, headerTP},
		{"an invalid _meta tracestate is dropped", mcp.Meta{"traceparent": tp, "tracestate": "a=b\r\nX-Injected: 1"}, "", tp},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []http.Header
			backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				got = append(got, r.Header.Clone())
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"results":[{"id":1}],"total":1}`))
			}))
			defer backend.Close()
			doc := mcptest.Policy(t, backend.URL, backend.URL, nil)
			snap, err := config.CompileSource("policy.yaml", doc, config.Options{})
			if err != nil {
				t.Fatal(err)
			}
			core, err := proxy.NewCore(snap, proxy.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer core.Close()
			srv := httptest.NewServer(mcptest.AgentHandler(core, mcpfront.Options{}))
			defer srv.Close()
			header := http.Header{}
			if tc.header != "" {
				header.Set("Traceparent", tc.header)
			}
			cs := mcptest.Connect(t, srv.URL+"/mcp", "2025-11-25", header)
			res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{
				Meta:      tc.meta,
				Name:      "search_articles",
				Arguments: map[string]any{"q": "go"},
			})
			if err != nil || res.IsError {
				t.Fatalf("call: %v %+v", err, res)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 1 {
				t.Fatalf("backend got %d requests", len(got))
			}
			if p := got[0].Get("Traceparent"); p != tc.want {
				t.Errorf("backend got traceparent %q, want %q", p, tc.want)
			}
			if s := got[0].Get("Tracestate"); s != "" {
				t.Errorf("backend got tracestate %q", s)
			}
			if got[0].Get("X-Injected") != "" {
				t.Errorf("a header was injected into the backend request: %v", got[0])
			}
		})
	}
}
