package proxy_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/proxy"
)

// TestMCPMetaTraceparentReachesTheBackend: an MCP client without header
// control sends its trace context in _meta; toolgate continues it.
func TestMCPMetaTraceparentReachesTheBackend(t *testing.T) {
	var mu sync.Mutex
	var got []string
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.Header.Get("Traceparent"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"results":[{"id":1}],"total":1}`))
	}))
	defer backend.Close()
	doc := mcpPolicy(t, backend.URL, backend.URL, nil)
	snap, err := config.CompileSource("policy.yaml", doc, config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	core, err := proxy.NewCore(snap, proxy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer core.Close()
	srv := httptest.NewServer(core.Handler())
	defer srv.Close()
	cs := mcpConnect(t, srv.URL+"/mcp", "2025-11-25", http.Header{})
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{
		Meta:      mcp.Meta{"traceparent": tp},
		Name:      "search_articles",
		Arguments: map[string]any{"q": "go"},
	})
	if err != nil || res.IsError {
		t.Fatalf("call: %v %+v", err, res)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != tp {
		t.Errorf("backend got traceparent %q, want %q", got, tp)
	}
}
