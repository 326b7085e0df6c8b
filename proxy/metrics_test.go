package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/policy"
)

const seriesPolicy = `
version: 1
upstreams:
  svc: {url: "{{url}}", timeout: 2s}
tools:
  search:
    description: Search.
    upstream: svc
    args: {type: object}
    request: {method: GET, path: /search}
  idle:
    description: Never called.
    upstream: svc
    args: {type: object}
    request: {method: GET, path: /idle}
access:
  default: allow
  callers:
{{callers}}
`

// seriesOfTool counts the series of reg whose tool label is tool, by metric.
func seriesOfTool(t *testing.T, reg *prometheus.Registry, tool string) map[string]int {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tool" && l.GetValue() == tool {
					n[f.GetName()]++
				}
			}
		}
	}
	return n
}

// TestToolSeriesAppearAtFirstCall: a tool has no metric series until its
// first call, and then every series it can record (each status for each
// caller and "unknown", its durations, violations, idempotency events and
// redactions); a reload that names a new caller adds its series at the
// tool's next call.
func TestToolSeriesAppearAtFirstCall(t *testing.T) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"results":[1]}`))
	}))
	t.Cleanup(backend.Close)
	policy := func(callers ...string) string {
		var list strings.Builder
		for _, c := range callers {
			list.WriteString("    " + c + `: {tools: ["*"]}` + "\n")
		}
		return strings.NewReplacer("{{url}}", backend.URL, "{{callers}}", list.String()).Replace(seriesPolicy)
	}
	reg := prometheus.NewRegistry()
	core := newTestCore(t, policy("alice", "bob"), Options{Registry: reg})
	front := serveCore(t, core)
	call := func(caller string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, front.URL+"/v1/tools/search", strings.NewReader(`{}`))
		req.Header.Set("X-Toolgate-Caller", caller)
		resp, err := front.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("search: HTTP %d", resp.StatusCode)
		}
	}
	// Seven statuses for each caller ("unknown", then the policy's), a
	// cost per caller, a duration per status, four violation kinds, seven
	// idempotency events, one redaction counter.
	want := func(callers int) map[string]int {
		return map[string]int{
			"toolgate_tool_calls_total":           7 * callers,
			"toolgate_tool_cost_total":            callers,
			"toolgate_tool_call_duration_seconds": 7,
			"toolgate_contract_violations_total":  4,
			"toolgate_idempotency_events_total":   7,
			"toolgate_secrets_redacted_total":     1,
		}
	}
	check := func(name, tool string, want map[string]int) {
		t.Run(name, func(t *testing.T) {
			got := seriesOfTool(t, reg, tool)
			for metric, n := range want {
				if got[metric] != n {
					t.Errorf("%s{tool=%q}: %d series, want %d", metric, tool, got[metric], n)
				}
			}
			for metric, n := range got {
				if _, ok := want[metric]; !ok {
					t.Errorf("%s{tool=%q}: %d series, want none", metric, tool, n)
				}
			}
		})
	}
	check("no series at load", "search", nil)
	call("alice")
	check("every series after the first call", "search", want(3))
	check("none for a tool never called", "idle", nil)
	if err := core.Swap(proxytest.Snapshot(t, policy("alice", "bob", "carol"))); err != nil {
		t.Fatal(err)
	}
	call("carol")
	check("a new caller's series after a reload", "search", want(4))
	check("still none for a tool never called, after a reload", "idle", nil)
}

// TestToolMetricsCountEachStatusUnderItsLabel: a call of each status is
// counted, and its duration observed, under that status's label, for a
// caller the policy names and for an unknown one; the arrays of metric
// children and the index that reads them follow contracts' one order.
func TestToolMetricsCountEachStatusUnderItsLabel(t *testing.T) {
	snap := &policy.Snapshot{Access: policy.Access{Callers: map[string]*policy.Caller{"planner": {Name: "planner"}}}}
	callers := policyCallers(snap)
	for _, caller := range []string{"planner", "unknown"} {
		for _, st := range contracts.Statuses() {
			t.Run(caller+" "+string(st), func(t *testing.T) {
				m := NewMetrics(prometheus.NewRegistry(), "test")
				tm := newToolMetrics(m, "search", callers)
				tm.record(st, caller, time.Millisecond, 0)
				for _, other := range contracts.Statuses() {
					want := 0.0
					if other == st {
						want = 1
					}
					if got := testutil.ToFloat64(m.ToolCalls.WithLabelValues("search", string(other), caller)); got != want {
						t.Errorf("toolgate_tool_calls_total{status=%q} = %v, want %v", other, got, want)
					}
					var h dto.Metric
					if err := m.ToolCallDuration.WithLabelValues("search", string(other)).(prometheus.Metric).Write(&h); err != nil {
						t.Fatal(err)
					}
					if got := h.GetHistogram().GetSampleCount(); got != uint64(want) {
						t.Errorf("toolgate_tool_call_duration_seconds{status=%q} count = %d, want %v", other, got, want)
					}
				}
			})
		}
	}
}
