package proxy

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

// TestToolMetricsCountEachStatusUnderItsLabel: a call of each status is
// counted, and its duration observed, under that status's label, for a
// caller the policy names and for an unknown one; the arrays of metric
// children and the index that reads them follow contracts' one order.
func TestToolMetricsCountEachStatusUnderItsLabel(t *testing.T) {
	snap := &policy.Snapshot{Access: policy.Access{Callers: map[string]*policy.Caller{"planner": {Name: "planner"}}}}
	for _, caller := range []string{"planner", "unknown"} {
		for _, st := range contracts.Statuses() {
			t.Run(caller+" "+string(st), func(t *testing.T) {
				m := NewMetrics(prometheus.NewRegistry(), "test")
				tm := newToolMetrics(m, "search", snap)
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
