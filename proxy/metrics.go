package proxy

import (
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

// Metrics are toolgate's Prometheus metrics (DESIGN.md section 5). Label
// values come only from the policy: unknown tools and callers are
// "unknown", so cardinality is bounded by the policy's size.
type Metrics struct {
	ToolCalls           *prometheus.CounterVec
	ToolCallDuration    *prometheus.HistogramVec
	ToolCost            *prometheus.CounterVec
	UpstreamRequests    *prometheus.CounterVec
	UpstreamDuration    *prometheus.HistogramVec
	IdempotencyEvents   *prometheus.CounterVec
	CircuitState        *prometheus.GaugeVec
	ContractViolations  *prometheus.CounterVec
	AccessRejections    *prometheus.CounterVec
	ConfigReloads       *prometheus.CounterVec
	ConfigLastReloadOK  prometheus.Gauge
	ConfigGeneration    prometheus.Gauge
	BuildInfo           *prometheus.GaugeVec
	IdempotencyStoreErr *prometheus.CounterVec
}

// The idempotency events of toolgate_idempotency_events_total.
const (
	EventStored      = "stored"
	EventReplayed    = "replayed"
	EventWaited      = "waited"
	EventMismatch    = "mismatch"
	EventMissingKey  = "missing_key"
	EventUnknownKept = "unknown_kept"
	EventEvicted     = "evicted"
)

// The kinds of toolgate_contract_violations_total.
const (
	ViolationSchema = "schema"
	ViolationKey    = "key"
	ViolationSize   = "size"
)

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer, version string) *Metrics {
	latency := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	m := &Metrics{
		ToolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_tool_calls_total",
			Help: "Tool calls by tool, envelope status and caller.",
		}, []string{"tool", "status", "caller"}),
		ToolCallDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "toolgate_tool_call_duration_seconds",
			Help:    "Duration of tool calls, from request to envelope.",
			Buckets: latency,
		}, []string{"tool", "status"}),
		ToolCost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_tool_cost_total",
			Help: "Cost units consumed by tool calls that reached the backend (replays cost nothing).",
		}, []string{"tool", "caller"}),
		UpstreamRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_upstream_requests_total",
			Help: "Backend attempts by upstream and HTTP code, or timeout, reset, connect, circuit_open.",
		}, []string{"upstream", "code"}),
		UpstreamDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "toolgate_upstream_request_duration_seconds",
			Help:    "Duration of backend attempts.",
			Buckets: latency,
		}, []string{"upstream"}),
		IdempotencyEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_idempotency_events_total",
			Help: "Idempotency events: stored, replayed, waited, mismatch, missing_key, unknown_kept, evicted.",
		}, []string{"tool", "event"}),
		CircuitState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "toolgate_circuit_state",
			Help: "Circuit breaker state per upstream: 0 closed, 1 half-open, 2 open.",
		}, []string{"upstream"}),
		ContractViolations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_contract_violations_total",
			Help: "Calls rejected by the contract: schema, key, size.",
		}, []string{"tool", "kind"}),
		AccessRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_access_rejections_total",
			Help: "Calls rejected by access control: denied, rate, budget.",
		}, []string{"caller", "tool", "reason"}),
		ConfigReloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_config_reloads_total",
			Help: "Policy reloads by result.",
		}, []string{"result"}),
		ConfigLastReloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "toolgate_config_last_reload_successful",
			Help: "Whether the last policy reload succeeded (1) or failed (0).",
		}),
		ConfigGeneration: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "toolgate_config_generation",
			Help: "Generation of the loaded policy; increases when a reload changes it.",
		}),
		BuildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "toolgate_build_info",
			Help: "Build information; the value is always 1.",
		}, []string{"version", "goversion"}),
		IdempotencyStoreErr: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "toolgate_idempotency_store_errors_total",
			Help: "Errors of the state store by operation (claim, complete, wait; budget for cost budgets); calls fail closed on them.",
		}, []string{"op"}),
	}
	reg.MustRegister(m.ToolCalls, m.ToolCallDuration, m.ToolCost, m.UpstreamRequests, m.UpstreamDuration,
		m.IdempotencyEvents, m.CircuitState, m.ContractViolations, m.AccessRejections, m.ConfigReloads,
		m.ConfigLastReloadOK, m.ConfigGeneration, m.BuildInfo, m.IdempotencyStoreErr)
	m.BuildInfo.WithLabelValues(version, runtime.Version()).Set(1)
	for _, op := range []string{"claim", "complete", "wait", "budget"} {
		m.IdempotencyStoreErr.WithLabelValues(op)
	}
	m.ConfigReloads.WithLabelValues("success")
	m.ConfigReloads.WithLabelValues("failure")
	return m
}

// statusIndex numbers the closed status set for arrays of metric children.
func statusIndex(s contracts.Status) int {
	switch s {
	case contracts.StatusOK:
		return 0
	case contracts.StatusEmpty:
		return 1
	case contracts.StatusBadArgs:
		return 2
	case contracts.StatusForbidden:
		return 3
	case contracts.StatusNotFound:
		return 4
	case contracts.StatusTimeout:
		return 5
	default:
		return 6
	}
}

const numStatuses = 7

// toolMetrics holds one tool's metric children, resolved when the policy is
// loaded, so recording a call does not hash label values. The label sets
// are fixed: every caller the policy names, plus "unknown".
type toolMetrics struct {
	m          *Metrics
	name       string
	calls      map[string]*[numStatuses]prometheus.Counter
	duration   [numStatuses]prometheus.Observer
	cost       map[string]prometheus.Counter
	violations map[string]prometheus.Counter
	events     map[string]prometheus.Counter
}

func newToolMetrics(m *Metrics, name string, snap *policy.Snapshot) *toolMetrics {
	tm := &toolMetrics{
		m:          m,
		name:       name,
		calls:      map[string]*[numStatuses]prometheus.Counter{},
		cost:       map[string]prometheus.Counter{},
		violations: map[string]prometheus.Counter{},
		events:     map[string]prometheus.Counter{},
	}
	callers := []string{"unknown"}
	for caller := range snap.Access.Callers {
		callers = append(callers, caller)
	}
	for _, caller := range callers {
		var byStatus [numStatuses]prometheus.Counter
		for _, st := range contracts.Statuses() {
			byStatus[statusIndex(st)] = m.ToolCalls.WithLabelValues(name, string(st), caller)
		}
		tm.calls[caller] = &byStatus
		tm.cost[caller] = m.ToolCost.WithLabelValues(name, caller)
	}
	for _, st := range contracts.Statuses() {
		tm.duration[statusIndex(st)] = m.ToolCallDuration.WithLabelValues(name, string(st))
	}
	for _, kind := range []string{ViolationSchema, ViolationKey, ViolationSize} {
		tm.violations[kind] = m.ContractViolations.WithLabelValues(name, kind)
	}
	for _, ev := range []string{EventStored, EventReplayed, EventWaited, EventMismatch, EventMissingKey, EventUnknownKept, EventEvicted} {
		tm.events[ev] = m.IdempotencyEvents.WithLabelValues(name, ev)
	}
	return tm
}

func (tm *toolMetrics) record(status contracts.Status, caller string, elapsed time.Duration, cost float64) {
	i := statusIndex(status)
	byStatus, ok := tm.calls[caller]
	if !ok {
		byStatus = tm.calls["unknown"]
	}
	byStatus[i].Inc()
	tm.duration[i].Observe(elapsed.Seconds())
	if cost > 0 {
		ctr, ok := tm.cost[caller]
		if !ok {
			ctr = tm.cost["unknown"]
		}
		ctr.Add(cost)
	}
}

func (tm *toolMetrics) violation(kind string) { tm.violations[kind].Inc() }

func (tm *toolMetrics) event(ev string) { tm.events[ev].Inc() }
