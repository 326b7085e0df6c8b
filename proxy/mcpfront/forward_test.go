package mcpfront_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/internal/testkit/mcptest"
	"github.com/toolgate/toolgate/proxy"
	"github.com/toolgate/toolgate/proxy/mcpfront"
)

// TestForwardHeadersOverMCP: an MCP call's agent headers are the HTTP
// request's that carried it; the listed ones reach the backend, the
// caller's identity never does.
func TestForwardHeadersOverMCP(t *testing.T) {
	var mu sync.Mutex
	var got http.Header
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = r.Header.Clone()
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"c-1"}`))
	}))
	defer backend.Close()
	doc := `
version: 1
upstreams:
  crm:
    url: ` + backend.URL + `
    forward_headers: [Authorization, X-Tenant]
tools:
  customer:
    description: Find a customer.
    upstream: crm
    args: {type: object}
    request: {method: GET, path: /customers}
`
	snap, err := config.CompileSource("mcp.yaml", []byte(doc), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	core, err := proxy.NewCore(snap, proxy.Options{Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mcptest.AgentHandler(core, mcpfront.Options{}))
	t.Cleanup(func() {
		srv.Close()
		core.Close()
	})
	header := http.Header{
		"Authorization":           {"Bearer user-42"},
		"X-Tenant":                {"acme"},
		"X-Toolgate-Caller":       {"ops"},
		"X-Forwarded-Client-Cert": {"URI=spiffe://cluster.local/ns/agents/sa/ops"},
		"X-Other":                 {"o"},
	}
	cs := mcptest.Connect(t, srv.URL+"/mcp", mcptest.Revisions[0], header)
	if res := mcptest.CallTool(t, cs, "customer", map[string]any{}); res.IsError {
		t.Fatalf("tools/call: %+v", res)
	}
	mu.Lock()
	defer mu.Unlock()
	if got.Get("Authorization") != "Bearer user-42" || got.Get("X-Tenant") != "acme" {
		t.Errorf("the listed headers did not pass: %v", got)
	}
	for _, name := range []string{"X-Toolgate-Caller", "X-Forwarded-Client-Cert", "X-Other"} {
		if v := got.Values(name); len(v) != 0 {
			t.Errorf("%s reached the backend: %q", name, v)
		}
	}
}
