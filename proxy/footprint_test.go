package proxy

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/testkit/proxytest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/policy"
)

// policyWithTools is the example policy with copies of search_articles,
// each on a path of its own, up to n tools in all (as bench/run.sh's
// tools=N).
func policyWithTools(tb testing.TB, n int) []byte {
	tb.Helper()
	doc := string(examples.Policy())
	start := strings.Index(doc, "\n  search_articles:\n")
	end := strings.Index(doc, "\n  send_notification:\n")
	if start < 0 || end < 0 || !strings.Contains(doc[start:end], "\n      path: /api/search\n") {
		tb.Fatal("examples/policy.yaml: search_articles not found")
	}
	tool := doc[start+1 : end+1]
	var copies strings.Builder
	for i := 3; i <= n; i++ {
		c := strings.Replace(tool, "  search_articles:\n", fmt.Sprintf("  search_articles_%d:\n", i), 1)
		copies.WriteString(strings.Replace(c, "      path: /api/search\n", fmt.Sprintf("      path: /api/search_%d\n", i), 1))
		copies.WriteString("\n")
	}
	at := strings.Index(doc, "\naccess:\n")
	return []byte(doc[:at+1] + copies.String() + doc[at+1:])
}

// loadedCore compiles a policy of n tools and serves one MCP tools/call
// and one HTTP call on it, so that everything built per tool (the
// snapshot, the core, the MCP server of the snapshot) is in memory.
func loadedCore(tb testing.TB, n int) *Core {
	tb.Helper()
	snap, err := config.CompileSource("policy.yaml", policyWithTools(tb, n), config.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	if len(snap.Tools) != n {
		tb.Fatalf("%d tools, want %d", len(snap.Tools), n)
	}
	answer := proxytest.SearchAnswer()
	core, err := NewCore(snap, Options{Registry: prometheus.NewRegistry(), Transport: func(*policy.Upstream) http.RoundTripper { return proxytest.CannedTransport{Body: answer} }})
	if err != nil {
		tb.Fatal(err)
	}
	h := agentHandler(core)
	ctx := proxytest.LoopbackContext()
	for _, r := range []struct{ path, body string }{
		{"/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search_articles","arguments":{"q":"go","limit":5}}}`},
		{"/v1/tools/search_articles", `{"q":"go","limit":5}`},
	} {
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:8080"+r.path, strings.NewReader(r.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK || !bytes.Contains(w.Body.Bytes(), []byte(`"status":"ok"`)) {
			tb.Fatalf("%s: HTTP %d: %s", r.path, w.Code, w.Body)
		}
	}
	return core
}

// heapInUse is the live heap after a collection, and the bytes allocated
// so far.
func heapInUse() (inUse, total uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, ms.TotalAlloc
}

// BenchmarkPolicyFootprint reports the heap a loaded policy holds per tool
// (bytes/tool) and what loading it allocates per tool (alloc-bytes/tool,
// the garbage behind the peak RSS of a load): the difference between
// 1,000 and 10 copies of the example's search tool, with the snapshot,
// the core and the MCP server built.
func BenchmarkPolicyFootprint(b *testing.B) {
	const small, large = 10, 1000
	var perTool, allocPerTool float64
	for b.Loop() {
		base, baseAlloc := heapInUse()
		c := loadedCore(b, small)
		mid, midAlloc := heapInUse()
		c.Close()
		base2, base2Alloc := heapInUse()
		c = loadedCore(b, large)
		top, topAlloc := heapInUse()
		c.Close()
		perTool = (float64(top) - float64(base2) - (float64(mid) - float64(base))) / (large - small)
		allocPerTool = (float64(topAlloc-base2Alloc) - float64(midAlloc-baseAlloc)) / (large - small)
	}
	b.ReportMetric(perTool, "bytes/tool")
	b.ReportMetric(allocPerTool, "alloc-bytes/tool")
}
