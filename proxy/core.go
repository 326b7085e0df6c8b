// Package proxy is toolgate's core pipeline and its HTTP front ends.
//
// A call runs begin → send → end, the same for every front end. A front
// takes a View (the policy snapshot the request runs on) as the request
// arrives, decodes its input into a Request, and either runs the whole
// call with View.Call, toolgate sending the backend request itself (the
// tool endpoint, MCP, transparent routes), or drives the halves itself
// with View.Begin and Call.Finish while Envoy sends (ext_proc). The stages,
// in order (call.go lists them with their functions): access, arguments
// and idempotency key (the backend request bound from them), the
// idempotency claim, rate and budget; then the breaker and bulkhead, the
// send with its deadline and safe retries, the classification of the
// answer; then the end: one function (finish) turns the outcome into the
// envelope, the metrics and the log line, and the idempotency record is
// settled. Each stage returns a contracts.Outcome.
package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/proxy/redact"
	"github.com/toolgate/toolgate/proxy/upstream"
)

// Options are the Core's collaborators. Zero values: a fresh registry, a
// discarding logger, time.Now and version "dev".
type Options struct {
	Registry prometheus.Registerer
	Logger   *slog.Logger
	Now      func() time.Time
	Version  string
	// Transport, when set, makes the round tripper of each upstream
	// instead of a pooled http.Transport (tests, embedding, the dry run):
	// its passthrough routes' and its tool calls', through an
	// upstream.NetHTTPClient whatever server.upstream_client says.
	Transport func(*policy.Upstream) http.RoundTripper
	// Store keeps idempotency records. Nil means a memory store bounded by
	// the policy's state.max_keys and state.max_bytes. The Core closes it in
	// Close.
	Store policy.IdempotencyStore
	// Budgets counts cost budgets. Nil means per-replica memory budgets.
	Budgets policy.BudgetStore
	// Limiters keeps the rate limits. Nil means per-replica memory buckets.
	Limiters policy.RateLimiter
	// TracerProvider records a span per call (OpenTelemetry). Nil means no
	// tracing: the agent's traceparent is passed to the backend as it came.
	TracerProvider trace.TracerProvider
	// Observer sees every backend exchange (learning mode); nil for none.
	Observer Observer
}

// Core runs tool calls against the current policy snapshot. A front end
// takes the snapshot a request runs on once, as a View (view.go).
type Core struct {
	state   atomic.Pointer[state]
	swapMu  sync.Mutex
	metrics *Metrics
	logger  *slog.Logger
	now     func() time.Time
	version string
	newRT   func(*policy.Upstream) http.RoundTripper
	store   policy.IdempotencyStore

	// Caller state that survives reloads, keyed by caller and tool names.
	limiters policy.RateLimiter
	budgets  policy.BudgetStore

	tr tracing

	observer Observer // learning mode; nil when off
}

// state is a snapshot with its runtime: upstream clients, breakers and
// per-tool metric children. A request loads it once (Core.View) and
// finishes on it, so a reload never changes a request midway.
type state struct {
	snap      *policy.Snapshot
	upstreams map[string]*upstreamRuntime
	tools     map[string]*tool
	unknown   *toolMetrics
	router    *router
}

// tool is a contract with everything resolved that a call needs.
type tool struct {
	contract *contracts.Contract
	upstream *upstreamRuntime
	// auth is the credential the tool's requests carry: the one it names,
	// or its upstream's auth (upstreamRuntime.authOf); nil for none.
	auth    *upstream.Auth
	baseURL url.URL // scheme and host of the upstream, path prefix trimmed
	prefix  string
	header  http.Header // static request headers
	metrics *toolMetrics
	// secrets are the needles of the ${VAR} values the tool's requests
	// carry (its binding's, its upstream's headers'); red is the redactor
	// of those and the upstream's credential (secrets.go).
	secrets []redact.Needle
	red     atomic.Pointer[redactor]
	// live is what the admin console reads (live.go), carried over by
	// name across reloads.
	live *toolLive
}

// NewCore creates a core serving snap.
func NewCore(snap *policy.Snapshot, opts Options) (*Core, error) {
	if opts.Registry == nil {
		opts.Registry = prometheus.NewRegistry()
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	c := &Core{
		metrics:  NewMetrics(opts.Registry, opts.Version),
		logger:   opts.Logger,
		now:      opts.Now,
		version:  opts.Version,
		newRT:    opts.Transport,
		store:    opts.Store,
		limiters: opts.Limiters,
		budgets:  opts.Budgets,
		tr:       newTracing(opts.TracerProvider),
		observer: opts.Observer,
	}
	if c.budgets == nil {
		c.budgets = policy.NewMemoryBudgets(opts.Now)
	}
	if c.limiters == nil {
		c.limiters = policy.NewRateLimiters(opts.Now)
	}
	if snap == nil {
		return nil, errors.New("nil policy snapshot")
	}
	if c.store == nil {
		c.store = policy.NewMemoryStore(policy.MemoryOptions{MaxKeys: snap.State.MaxKeys, MaxBytes: snap.State.MaxBytes, Now: opts.Now, OnEvict: c.onEvict})
	}
	if err := c.Swap(snap); err != nil {
		return nil, err
	}
	return c, nil
}

// Logger is the core's logger, for the fronts' own log lines.
func (c *Core) Logger() *slog.Logger { return c.logger }

// Version is toolgate's version, as the fronts name it to their clients.
func (c *Core) Version() string { return c.version }

// Metrics returns the core's metrics.
func (c *Core) Metrics() *Metrics { return c.metrics }

// Snapshot returns the policy snapshot new calls run on.
func (c *Core) Snapshot() *policy.Snapshot { return c.state.Load().snap }

// Swap makes snap the policy for new calls. Calls in flight finish on the
// snapshot they started with. Upstream runtimes (connection pools,
// breakers, bulkheads) whose settings did not change are carried over.
func (c *Core) Swap(snap *policy.Snapshot) error {
	if snap == nil {
		return errors.New("nil policy snapshot")
	}
	c.swapMu.Lock()
	defer c.swapMu.Unlock()
	prev := c.state.Load()
	callers := policyCallers(snap)
	// A tool's metric children carry over when its label values do not
	// change; otherwise they are resolved again at its next call.
	metricsOf := func(name string, old *toolMetrics) *toolMetrics {
		if old != nil && slices.Equal(old.callers, callers) {
			return old
		}
		return newToolMetrics(c.metrics, name, callers)
	}
	st := &state{
		snap:      snap,
		upstreams: make(map[string]*upstreamRuntime, len(snap.Upstreams)),
		tools:     make(map[string]*tool, len(snap.Tools)),
	}
	if prev != nil {
		st.unknown = metricsOf("unknown", prev.unknown)
	} else {
		st.unknown = metricsOf("unknown", nil)
	}
	uo := upstreamOptions{newRT: c.newRT, kind: snap.Server.UpstreamClient, env: upstream.Env{Now: c.now, Logger: c.logger}}
	for name, cfg := range snap.Upstreams {
		var old *upstreamRuntime
		if prev != nil {
			old = prev.upstreams[name]
		}
		st.upstreams[name] = newUpstream(cfg, c.metrics, old, uo)
	}
	for name, contract := range snap.Tools {
		up := st.upstreams[contract.Upstream]
		if up == nil {
			return fmt.Errorf("tool %s: upstream %q is not defined", name, contract.Upstream)
		}
		var oldMetrics *toolMetrics
		if prev != nil && prev.tools[name] != nil {
			oldMetrics = prev.tools[name].metrics
		}
		t := &tool{contract: contract, upstream: up, auth: up.authOf(contract.Credential), metrics: metricsOf(name, oldMetrics)}
		if prev != nil && prev.tools[name] != nil {
			t.live = prev.tools[name].live
		} else {
			t.live = new(toolLive)
		}
		t.baseURL = url.URL{Scheme: up.cfg.URL.Scheme, Host: up.cfg.URL.Host}
		t.prefix = strings.TrimSuffix(up.cfg.URL.Path, "/")
		t.header = staticHeader(up.cfg.Headers, contract.Binding, c.version)
		t.secrets = slices.Clip(up.headerSecrets)
		for _, v := range contract.Binding.Secrets() {
			t.secrets = redact.AppendNeedles(t.secrets, v)
		}
		t.redactor()
		st.tools[name] = t
	}
	st.router = newRouter(st, snap.Server.CallerHeader)
	c.state.Store(st)
	c.limiters.Retain(snap.Access.Callers)
	if prev != nil {
		// Connection pools no tool uses any more are closed; calls in
		// flight on them finish, only idle connections go.
		for name, up := range prev.upstreams {
			if next := st.upstreams[name]; next == nil || next.client != up.client {
				up.closeIdle()
			} else {
				// The old token endpoint clients.
				if next.auth != up.auth {
					up.auth.CloseIdle()
				}
				for name, a := range up.creds {
					if next.creds[name] != a {
						a.CloseIdle()
					}
				}
			}
		}
	}
	return nil
}

// staticHeader is the header every request of a tool starts with: the
// tool's constant headers, over the upstream's, over toolgate's defaults
// (User-Agent, Accept: application/json, and the Content-Type of the
// body's encoding). A configured header always wins over a default.
func staticHeader(upstream http.Header, b *contracts.Binding, version string) http.Header {
	h := upstream.Clone()
	if h == nil {
		h = http.Header{}
	}
	for k, v := range b.StaticHeader() {
		h[k] = v
	}
	setDefault := func(k, v string) {
		if _, ok := h[k]; !ok {
			h[k] = []string{v}
		}
	}
	setDefault("User-Agent", "toolgate/"+version)
	setDefault("Accept", "application/json")
	if b.HasBody() {
		setDefault("Content-Type", b.ContentType())
	}
	return h
}

// Close releases idle backend connections and closes the idempotency
// store. Calls in flight must have finished.
func (c *Core) Close() {
	for _, up := range c.state.Load().upstreams {
		up.closeIdle()
	}
	_ = c.store.Close()
}

// Ping checks the idempotency store, for readiness.
func (c *Core) Ping(ctx context.Context) error { return c.store.Ping(ctx) }
