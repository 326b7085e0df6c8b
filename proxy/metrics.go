package proxy

import (
	"maps"
	"runtime"
	"slices"
	"sync/atomic"
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
	SecretsRedacted     *prometheus.CounterVec
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
	// ViolationResponse: a 2xx JSON answer its response.schema does not
	// accept (counted only; the envelope is unchanged).
	ViolationResponse = "response"
)

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer, version string) *Metrics {
	// One line a metric: name, help and labels (DESIGN section 5).
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	}
	latency := func(name, help string, labels ...string) *prometheus.HistogramVec {
		buckets := []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	}
	m := &Metrics{
		ToolCalls: counter("toolgate_tool_calls_total",
			"Tool calls by tool, envelope status and caller.",
			"tool", "status", "caller"),
		ToolCallDuration: latency("toolgate_tool_call_duration_seconds",
			"Duration of tool calls, from request to envelope.",
			"tool", "status"),
		ToolCost: counter("toolgate_tool_cost_total",
			"Cost units consumed by tool calls that reached the backend (replays cost nothing).",
			"tool", "caller"),
		UpstreamRequests: counter("toolgate_upstream_requests_total",
			"Backend attempts by upstream and HTTP code, or timeout, reset, connect, circuit_open.",
			"upstream", "code"),
		UpstreamDuration: latency("toolgate_upstream_request_duration_seconds",
			"Duration of backend attempts.",
			"upstream"),
		IdempotencyEvents: counter("toolgate_idempotency_events_total",
			"Idempotency events: stored, replayed, waited, mismatch, missing_key, unknown_kept, evicted.",
			"tool", "event"),
		CircuitState: gauge("toolgate_circuit_state",
			"Circuit breaker state per upstream: 0 closed, 1 half-open, 2 open.",
			"upstream"),
		ContractViolations: counter("toolgate_contract_violations_total",
			"Contract violations: calls rejected for their arguments (schema), key or size; backend answers that break response.schema (response).",
			"tool", "kind"),
		AccessRejections: counter("toolgate_access_rejections_total",
			"Calls rejected by access control: denied, rate, budget.",
			"caller", "tool", "reason"),
		ConfigReloads: counter("toolgate_config_reloads_total",
			"Policy reloads by result.",
			"result"),
		ConfigLastReloadOK: prometheus.NewGauge(prometheus.GaugeOpts{Name: "toolgate_config_last_reload_successful",
			Help: "Whether the last policy reload succeeded (1) or failed (0)."}),
		ConfigGeneration: prometheus.NewGauge(prometheus.GaugeOpts{Name: "toolgate_config_generation",
			Help: "Generation of the loaded policy; increases when a reload changes it."}),
		BuildInfo: gauge("toolgate_build_info",
			"Build information; the value is always 1.",
			"version", "goversion"),
		IdempotencyStoreErr: counter("toolgate_idempotency_store_errors_total",
			"Errors of the state store by operation (claim, complete, wait; budget for cost budgets); calls fail closed on them.",
			"op"),
		SecretsRedacted: counter("toolgate_secrets_redacted_total",
			"Occurrences of a secret toolgate holds (an upstream credential, a ${VAR} value it sends, a forwarded credential) replaced in backend answers, by tool; tool is empty for a passthrough answer kept by learning mode.",
			"tool"),
	}
	reg.MustRegister(m.ToolCalls, m.ToolCallDuration, m.ToolCost, m.UpstreamRequests, m.UpstreamDuration,
		m.IdempotencyEvents, m.CircuitState, m.ContractViolations, m.AccessRejections, m.ConfigReloads,
		m.ConfigLastReloadOK, m.ConfigGeneration, m.BuildInfo, m.IdempotencyStoreErr, m.SecretsRedacted)
	m.BuildInfo.WithLabelValues(version, runtime.Version()).Set(1)
	for _, op := range []string{"claim", "complete", "wait", "budget"} {
		m.IdempotencyStoreErr.WithLabelValues(op)
	}
	m.ConfigReloads.WithLabelValues("success")
	m.ConfigReloads.WithLabelValues("failure")
	return m
}

// statusIndex is s's place in contracts' one order of the statuses, the
// index of the arrays of metric children. Every status comes from that
// closed set; a value outside it (none is made) counts as upstream.
func statusIndex(s contracts.Status) int {
	if i, ok := s.Index(); ok {
		return i
	}
	i, _ := contracts.StatusUpstream.Index()
	return i
}

// toolMetrics are one tool's metric children. They are resolved at the
// tool's first call, not when the policy loads: a policy of a thousand
// tools of which an agent uses a few would otherwise hold some forty
// series per tool (about 30 KiB of heap each; docs/performance.md), and a
// tool that was never called has no series. Resolved, a tool has every
// series it can record — each status for every caller the policy names
// plus "unknown", the durations, violations and idempotency events — so
// recording a call does not hash label values, and a tool's rows appear
// together. The children of a tool whose callers did not change carry over
// a reload (Core.Swap).
type toolMetrics struct {
	m    *Metrics
	name string
	// callers are the policy's callers, sorted, with "unknown" first:
	// the label values of a resolved tool.
	callers []string
	series  atomic.Pointer[toolSeries]
}

// toolSeries are a tool's resolved metric children.
type toolSeries struct {
	calls      map[string]*[contracts.NumStatuses]prometheus.Counter
	duration   [contracts.NumStatuses]prometheus.Observer
	cost       map[string]prometheus.Counter
	violations map[string]prometheus.Counter
	events     map[string]prometheus.Counter
	redacted   prometheus.Counter
}

// policyCallers returns the label values of the caller label for snap:
// "unknown" and every caller the policy names, sorted.
func policyCallers(snap *policy.Snapshot) []string {
	callers := slices.Sorted(maps.Keys(snap.Access.Callers))
	return slices.Insert(slices.DeleteFunc(callers, func(c string) bool { return c == "unknown" }), 0, "unknown")
}

func newToolMetrics(m *Metrics, name string, callers []string) *toolMetrics {
	return &toolMetrics{m: m, name: name, callers: callers}
}

// get returns the tool's children, resolving them at the first call. Two
// calls racing to resolve them get the same children from the vectors.
func (tm *toolMetrics) get() *toolSeries {
	if s := tm.series.Load(); s != nil {
		return s
	}
	m, name := tm.m, tm.name
	s := &toolSeries{
		calls:      make(map[string]*[contracts.NumStatuses]prometheus.Counter, len(tm.callers)),
		cost:       make(map[string]prometheus.Counter, len(tm.callers)),
		violations: map[string]prometheus.Counter{},
		events:     map[string]prometheus.Counter{},
		redacted:   m.SecretsRedacted.WithLabelValues(name),
	}
	for _, caller := range tm.callers {
		var byStatus [contracts.NumStatuses]prometheus.Counter
		for _, st := range contracts.Statuses() {
			byStatus[statusIndex(st)] = m.ToolCalls.WithLabelValues(name, string(st), caller)
		}
		s.calls[caller] = &byStatus
		s.cost[caller] = m.ToolCost.WithLabelValues(name, caller)
	}
	for _, st := range contracts.Statuses() {
		s.duration[statusIndex(st)] = m.ToolCallDuration.WithLabelValues(name, string(st))
	}
	for _, kind := range []string{ViolationSchema, ViolationKey, ViolationSize, ViolationResponse} {
		s.violations[kind] = m.ContractViolations.WithLabelValues(name, kind)
	}
	for _, ev := range []string{EventStored, EventReplayed, EventWaited, EventMismatch, EventMissingKey, EventUnknownKept, EventEvicted} {
		s.events[ev] = m.IdempotencyEvents.WithLabelValues(name, ev)
	}
	if !tm.series.CompareAndSwap(nil, s) {
		return tm.series.Load()
	}
	return s
}

func (tm *toolMetrics) record(status contracts.Status, caller string, elapsed time.Duration, cost float64) {
	s := tm.get()
	i := statusIndex(status)
	byStatus, ok := s.calls[caller]
	if !ok {
		byStatus = s.calls["unknown"]
	}
	byStatus[i].Inc()
	s.duration[i].Observe(elapsed.Seconds())
	if cost > 0 {
		ctr, ok := s.cost[caller]
		if !ok {
			ctr = s.cost["unknown"]
		}
		ctr.Add(cost)
	}
}

func (tm *toolMetrics) violation(kind string) { tm.get().violations[kind].Inc() }

func (tm *toolMetrics) event(ev string) { tm.get().events[ev].Inc() }

func (tm *toolMetrics) redacted(n int) { tm.get().redacted.Add(float64(n)) }
