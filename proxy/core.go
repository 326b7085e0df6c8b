// Package proxy is toolgate's core pipeline and its HTTP front ends.
//
// Core.Call is a plain function of a context and a Request: every front end
// (the tool endpoint, MCP, transparent routes, Envoy ext_proc) only decodes
// its input into a Request and encodes the Result. Each stage of the
// pipeline returns a contracts.Outcome; one function, finish, turns the
// outcome into the envelope, the metrics and the log line.
package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/policy"
)

// Options are the Core's collaborators. Zero values: a fresh registry, a
// discarding logger, time.Now and version "dev".
type Options struct {
	Registry prometheus.Registerer
	Logger   *slog.Logger
	Now      func() time.Time
	Version  string
	// Transport, when set, makes the round tripper of each upstream
	// instead of a pooled http.Transport (tests, embedding).
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

// Core runs tool calls against the current policy snapshot.
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
// per-tool metric children. Calls load it once and finish on it, so a
// reload never changes a call midway.
type state struct {
	snap      *policy.Snapshot
	upstreams map[string]*upstream
	tools     map[string]*tool
	unknown   *toolMetrics
	router    *router
}

// tool is a contract with everything resolved that a call needs.
type tool struct {
	contract *contracts.Contract
	upstream *upstream
	baseURL  url.URL // scheme and host of the upstream, path prefix trimmed
	prefix   string
	header   http.Header // static request headers
	metrics  *toolMetrics
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
	st := &state{
		snap:      snap,
		upstreams: make(map[string]*upstream, len(snap.Upstreams)),
		tools:     make(map[string]*tool, len(snap.Tools)),
		unknown:   newToolMetrics(c.metrics, "unknown", snap),
	}
	for name, cfg := range snap.Upstreams {
		var old *upstream
		if prev != nil {
			old = prev.upstreams[name]
		}
		st.upstreams[name] = newUpstream(cfg, c.metrics, old, c.newRT, runtimeEnv{now: c.now, logger: c.logger})
	}
	for name, contract := range snap.Tools {
		up := st.upstreams[contract.Upstream]
		if up == nil {
			return fmt.Errorf("tool %s: upstream %q is not defined", name, contract.Upstream)
		}
		t := &tool{contract: contract, upstream: up, metrics: newToolMetrics(c.metrics, name, snap)}
		t.baseURL = url.URL{Scheme: up.cfg.URL.Scheme, Host: up.cfg.URL.Host}
		t.prefix = strings.TrimSuffix(up.cfg.URL.Path, "/")
		t.header = staticHeader(up.cfg.Headers, contract.Binding, c.version)
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
			} else if next.auth != up.auth {
				up.auth.closeIdle() // the old token endpoint client
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

// Request is one tool call as a front end decoded it.
type Request struct {
	Tool string
	// Body holds the arguments as a JSON object (HTTP, transparent mode).
	// When nil, Args is used (MCP hands over decoded arguments).
	Body []byte
	Args map[string]any
	// BodyTooLarge says the front end stopped reading a body over
	// server.max_request_bytes.
	BodyTooLarge bool
	// Invalid says the front end could not extract the arguments (a query
	// value that does not fit its type, in transparent mode).
	Invalid error
	// Caller is the caller's identity as the front end resolved it; empty
	// for none.
	Caller string
	// CallID is the request's X-Request-Id, or empty for a fresh id.
	CallID string
	// IdempotencyKey is the raw Idempotency-Key header, if any.
	IdempotencyKey string
	// Front names the front end for the log line: http, mcp, transparent,
	// extproc.
	Front string
	// LogAttrs are extra fields for the log line (the MCP method).
	LogAttrs []slog.Attr
	// TraceParent and TraceState are the agent's W3C trace context (HTTP
	// headers, or MCP _meta).
	TraceParent string
	TraceState  string
	// Header is the agent's request header; only the names an upstream's
	// forward_headers lists are read from it. Nil for none.
	Header http.Header
}

// Result is a finished call.
type Result struct {
	Envelope contracts.Envelope
	Reason   contracts.Reason
	// RetryLater: nothing happened at the backend and a retry may succeed
	// (503 with Retry-After in mapped mode).
	RetryLater bool
}

// HTTPStatus is the result's HTTP status in mapped mode, by the reason
// table (contracts.MappedHTTP).
func (r *Result) HTTPStatus() int {
	code, _ := contracts.MappedHTTP(r.Reason, r.Envelope.Status, r.RetryLater)
	return code
}

// call is the state of one call while the pipeline runs.
type call struct {
	st       *state
	tool     *tool
	req      *Request
	args     map[string]any
	callID   string
	caller   string
	start    time.Time
	attempts int
	sent     bool // the backend may have received the request
	upCode   string

	// Idempotency of side-effecting calls.
	forwardKey string              // sent in the contract's forward header
	claim      *claim              // this call owns its key; settle after finish
	replay     *contracts.Envelope // a stored envelope answers this call
	replayLost bool                // the key's earlier call died mid-call

	charge *policy.BudgetCharge // cost taken from the caller's budget

	span trace.Span // the call's span, when tracing
}

// Call runs one tool call through the pipeline and always returns a result.
func (c *Core) Call(ctx context.Context, req *Request) *Result {
	st := c.state.Load()
	cl := &call{st: st, req: req, start: c.now(), callID: callID(req.CallID)}
	cl.caller = st.snap.Access.CallerLabel(req.Caller)
	cl.tool = st.tools[req.Tool]
	ctx, cl.span = c.tr.startCall(ctx, req)
	var res *Result
	if cl.tool == nil {
		res = c.finish(ctx, cl, contracts.Reject(contracts.ReasonUnknownTool))
	} else {
		tctx, cancel := context.WithTimeout(ctx, cl.tool.contract.Timeout)
		res = c.end(tctx, cl, c.run(tctx, cl))
		cancel()
	}
	c.tr.endCall(cl.span, cl, res)
	return res
}

// run is the pipeline, in order. Every stage either passes or returns the
// outcome that ends the call.
func (c *Core) run(ctx context.Context, cl *call) contracts.Outcome {
	bound, o, ok := c.begin(ctx, cl)
	if !ok {
		return o
	}
	return c.execute(ctx, cl, bound)
}

// begin runs every stage before the backend call, in order: access,
// arguments and idempotency key, the idempotency claim (which may answer
// with a stored result), then rate and budget. ok=false carries the outcome
// that ends the call without sending (a rejection or a replay); a claim
// already taken is released when the call ends unsent.
func (c *Core) begin(ctx context.Context, cl *call) (contracts.Bound, contracts.Outcome, bool) {
	t := cl.tool
	if o, ok := c.allow(cl); !ok {
		return contracts.Bound{}, o, false
	}
	bound, key, o, ok := c.validate(ctx, cl)
	if !ok {
		return contracts.Bound{}, o, false
	}
	if t.contract.SideEffect {
		cctx, span := c.tr.child(ctx, "toolgate.idempotency.claim", trace.SpanKindInternal)
		o, owned := c.claimKey(cctx, cl, key)
		endChild(span, &o)
		if !owned {
			return contracts.Bound{}, o, false
		}
	}
	if o, ok := c.charge(ctx, cl); !ok {
		return contracts.Bound{}, o, false
	}
	return bound, contracts.Outcome{}, true
}

// validate decodes and checks the arguments and the idempotency key, and
// binds the backend request.
func (c *Core) validate(ctx context.Context, cl *call) (bound contracts.Bound, key string, o contracts.Outcome, ok bool) {
	if _, span := c.tr.child(ctx, "toolgate.validate", trace.SpanKindInternal); span != nil {
		defer func() { endChild(span, &o) }()
	}
	t := cl.tool
	if cl.req.Invalid != nil {
		t.metrics.violation(ViolationSchema)
		return contracts.Bound{}, "", argOutcome(cl.req.Invalid), false
	}
	args, o, ok := decodeArgs(cl.req, cl.st.snap.Server.MaxRequestBytes)
	if !ok {
		kind := ViolationSchema
		if o.Reason == contracts.ReasonTooLarge {
			kind = ViolationSize
		}
		t.metrics.violation(kind)
		return contracts.Bound{}, "", o, false
	}
	cl.args = args
	var keyArg any
	var hasKeyArg bool
	if t.contract.SideEffect {
		// The key argument belongs to toolgate, never to the backend.
		keyArg, hasKeyArg = args[contracts.IdempotencyKeyArg]
		delete(args, contracts.IdempotencyKeyArg)
	}
	if err := t.contract.Schema.Validate(args); err != nil {
		t.metrics.violation(ViolationSchema)
		return contracts.Bound{}, "", argOutcome(err), false
	}
	if t.contract.SideEffect {
		var reason contracts.Reason
		if key, reason = idempotencyKey(cl.req.IdempotencyKey, keyArg, hasKeyArg); reason != "" {
			t.metrics.violation(ViolationKey)
			if reason == contracts.ReasonKeyMissing {
				t.metrics.event(EventMissingKey)
			}
			return contracts.Bound{}, "", contracts.Reject(reason), false
		}
	}
	bound, err := t.contract.Binding.Bind(args)
	if err != nil {
		t.metrics.violation(ViolationSchema)
		return contracts.Bound{}, "", argOutcome(err), false
	}
	return bound, key, contracts.Outcome{}, true
}

func argOutcome(err error) contracts.Outcome { return contracts.ArgOutcome(err) }

// decodeArgs turns the request's arguments into a JSON object with numbers
// kept as json.Number, so the schema sees exactly what was sent.
func decodeArgs(req *Request, limit int64) (map[string]any, contracts.Outcome, bool) {
	if req.BodyTooLarge || int64(len(req.Body)) > limit {
		o := contracts.Reject(contracts.ReasonTooLarge)
		o.Detail = fmt.Sprint(limit)
		return nil, o, false
	}
	if req.Body == nil {
		if req.Args == nil {
			return map[string]any{}, contracts.Outcome{}, true
		}
		return req.Args, contracts.Outcome{}, true
	}
	body := bytes.TrimSpace(req.Body)
	if len(body) == 0 {
		return map[string]any{}, contracts.Outcome{}, true
	}
	args, err := contracts.DecodeArgs(body, maxArgsDepth)
	if err != nil {
		return nil, contracts.ArgOutcome(err), false
	}
	return args, contracts.Outcome{}, true
}

// execute sends the bound request with the breaker, the bulkhead and safe
// retries, and classifies the final answer.
func (c *Core) execute(ctx context.Context, cl *call, bound contracts.Bound) contracts.Outcome {
	t := cl.tool
	up := t.upstream
	retries := up.cfg.Retries
	var last contracts.Outcome
	for n := 1; ; n++ {
		o, final := c.attempt(ctx, cl, bound)
		last = o
		if final || n >= retries.Attempts || !safeToRetry(t.contract, o) {
			return last
		}
		delay := retries.Delay(n+1, nil)
		if o.RetryAfter > delay {
			delay = o.RetryAfter
		}
		deadline, _ := ctx.Deadline()
		if c.now().Add(delay).After(deadline) {
			return last // retry_after_ms tells the agent when to come back
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return last
		case <-timer.C:
		}
	}
}

// safeToRetry: a read-only tool may resend any retryable failure; a
// side-effecting call only one that never reached the backend.
func safeToRetry(ct *contracts.Contract, o contracts.Outcome) bool {
	if !o.Retryable || o.Reason == contracts.ReasonCircuitOpen || o.Reason == contracts.ReasonBulkhead || o.Reason == contracts.ReasonCanceled {
		return false
	}
	return !ct.SideEffect || o.Effect == contracts.SideEffectNone
}

// attempt runs one backend attempt; final says the outcome must not be
// retried whatever its class (a success, or an answer the rules classified).
func (c *Core) attempt(ctx context.Context, cl *call, bound contracts.Bound) (contracts.Outcome, bool) {
	t := cl.tool
	up := t.upstream
	done, wait, err := up.breaker.Allow()
	if err != nil {
		up.codes.circuit.Inc()
		cl.upCode = "circuit_open"
		o := contracts.Reject(contracts.ReasonCircuitOpen)
		o.RetryAfter = wait
		return o, false
	}
	if !up.bulk.acquire(cl.caller) {
		done(policy.VerdictIgnored)
		cl.upCode = "bulkhead"
		return contracts.Reject(contracts.ReasonBulkhead), false
	}
	cl.attempts++
	actx, span := c.tr.child(ctx, "toolgate.upstream.attempt", trace.SpanKindClient)
	req := c.newRequest(actx, cl, bound)
	ct := t.contract
	dedupes := ct.Idempotency.ForwardHeader != ""
	sentAt := c.observeStart()
	a := up.send(actx, req, cl.st.snap.Server.MaxResponseBytes, ct.SideEffect, dedupes)
	up.bulk.release(cl.caller)
	done(a.verdict)
	c.observeAttempt(cl, bound, req, &a, sentAt)
	if span != nil {
		span.SetAttributes(attribute.Int("toolgate.attempt", cl.attempts), attribute.String("toolgate.upstream", ct.Upstream))
		if a.code != 0 {
			span.SetAttributes(attribute.Int("http.response.status_code", a.code))
		}
		endChild(span, &a.outcome)
	}
	if a.sent {
		cl.sent = true
	}
	if a.code != 0 {
		cl.upCode = strconv.Itoa(a.code)
	} else {
		cl.upCode = string(a.outcome.Reason)
	}
	defer putBody(a.buf)
	if a.code == 0 || a.outcome.Reason == contracts.ReasonBadResponse || a.outcome.Reason == contracts.ReasonDeadline {
		return a.outcome, false
	}
	return c.classify(ctx, cl, &a)
}

func (c *Core) newRequest(ctx context.Context, cl *call, bound contracts.Bound) *http.Request {
	t := cl.tool
	u := t.baseURL
	// Opaque carries the path exactly as the binding escaped it.
	u.Opaque = t.prefix + bound.Path
	u.RawQuery = bound.Query
	req := &http.Request{
		Method:     t.contract.Binding.Method(),
		URL:        &u,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     t.backendHeader(cl, bound, 2),
		Host:       u.Host,
	}
	// The context is set once, with the client trace, in upstream.send.
	if bound.Body != nil {
		req.Body = io.NopCloser(bytes.NewReader(bound.Body))
		req.ContentLength = int64(len(bound.Body))
		body := bound.Body
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	c.tr.inject(ctx, cl.req, req.Header)
	return req
}

// backendHeader makes a backend request's header, for every front alike:
// the static headers, the headers the binding bound for this call, the
// agent's headers the upstream forwards, the call id and the forwarded
// idempotency key, with room for extra more. The credential is added
// where the request is sent (upstream.send, Pending.Backend).
// The value slices are shared, never copied: the transport only reads
// them, and Set replaces a slice rather than writing into it.
func (t *tool) backendHeader(cl *call, bound contracts.Bound, extra int) http.Header {
	h := make(http.Header, len(t.header)+len(bound.Header)+2+extra)
	for k, v := range t.header {
		h[k] = v
	}
	for k, v := range bound.Header {
		h[k] = v
	}
	t.upstream.forward(h, cl.req.Header)
	h["X-Request-Id"] = []string{cl.callID}
	if name := t.contract.Idempotency.ForwardHeader; name != "" && cl.forwardKey != "" {
		h.Set(name, cl.forwardKey)
	}
	return h
}

// classify applies the contract's rules and the default table to an answer.
func (c *Core) classify(ctx context.Context, cl *call, a *attempt) (contracts.Outcome, bool) {
	ct := cl.tool.contract
	rules := ct.Rules
	dedupes := ct.Idempotency.ForwardHeader != ""
	success := a.code >= 200 && a.code < 300
	in := contracts.RuleInput{Ctx: ctx, Status: a.code, Header: a.header, Args: cl.args}
	body := bytes.TrimSpace(a.body)
	var parseErr error
	if len(body) > 0 && (success || rules.NeedsBody()) {
		// One parse serves the rules, the data and the envelope.
		in.Body, parseErr = contracts.ParseBody(body)
		defer in.Body.Release() // the outcome holds copies only
	}
	m, matched, err := rules.MatchError(&in)
	if err != nil {
		// A rule that could not be evaluated (cost limit, deadline, a type
		// error) leaves the answer unread: never "no match".
		return contracts.Unreadable(a.code, a.outcome), true
	}
	if matched {
		return contracts.ApplyRule(m, a.code, ct.SideEffect, dedupes, retryAfter(a.header, c.now())), true
	}
	if !success {
		return a.outcome, false
	}
	if parseErr != nil {
		return contracts.BadResponse(a.code), true
	}
	o := contracts.Answered(a.code)
	data, members, shaped, err := rules.DataMembers(make([]byte, 0, len(body)), &in)
	if err != nil {
		return contracts.BadResponse(a.code), true
	}
	o.Members = members
	if !shaped {
		data = nil
		if in.Body != nil {
			data = in.Body.AppendCompact(make([]byte, 0, len(body)))
		}
	}
	if string(data) == "null" {
		data = nil
	}
	o.Data = data
	empty, ruled, err := rules.Empty(&in)
	if err != nil {
		return contracts.BadResponse(a.code), true
	}
	if !ruled {
		// Without a rule, "nothing found" is data that holds nothing. A
		// side-effecting call that answered without a body (204) did its job.
		empty = isEmptyJSON(data) && (len(body) > 0 || !ct.SideEffect)
	}
	if empty {
		o.Empty()
	}
	return o, true
}

func isEmptyJSON(data []byte) bool {
	switch string(data) {
	case "", "null", "[]", "{}", `""`:
		return true
	}
	return false
}

// finish renders the outcome into the envelope, records metrics and writes
// the log line. It is the only place that does.
func (c *Core) finish(ctx context.Context, cl *call, o contracts.Outcome) *Result {
	st := cl.st
	res := &Result{Reason: o.Reason, RetryLater: o.RetryLater()}
	env := &res.Envelope
	if cl.replay != nil {
		// The stored envelope answers, as this call: its own call_id, no
		// cost (nothing ran), marked replayed.
		*env = *cl.replay
		env.Replayed, env.Cost, env.CallID, env.Tool = true, 0, cl.callID, cl.req.Tool
		// It says so in words as well: many clients show the model only
		// the observation.
		m := c.message(st, cl, &o)
		env.Message = m.Text
		env.Observation = contracts.EnvelopeObservation(env.Status, m, env.Data, observationOptions(st, cl))
		c.record(ctx, cl, res)
		return res
	}
	env.Status = o.Status
	env.Tool = cl.req.Tool
	env.CallID = cl.callID
	env.Data = o.Data
	env.Retryable = o.Retryable
	env.SideEffect = contracts.SideEffectNone
	sideEffect := cl.tool != nil && cl.tool.contract.SideEffect
	if sideEffect {
		env.SideEffect = o.Effect
	}
	env.SideEffectDone = env.SideEffect == contracts.SideEffectDone
	env.RetryAfterMS = o.RetryAfterMS()
	if cl.tool != nil && cl.sent {
		env.Cost = cl.tool.contract.Cost
	}
	env.Replayed = cl.replayLost
	m := c.message(st, cl, &o)
	env.Message = m.Text
	// Envelope data is always compact, valid UTF-8 JSON (the backend's
	// answer went through the tape parser), so it is not validated again.
	env.Observation = contracts.EnvelopeObservation(env.Status, m, env.Data, observationOptions(st, cl))
	c.record(ctx, cl, res)
	return res
}

// record counts the call and writes its log line.
func (c *Core) record(ctx context.Context, cl *call, res *Result) {
	metrics := cl.st.unknown
	if cl.tool != nil {
		metrics = cl.tool.metrics
	}
	elapsed := c.now().Sub(cl.start)
	metrics.record(res.Envelope.Status, cl.caller, elapsed, res.Envelope.Cost)
	if c.logger.Enabled(ctx, slog.LevelInfo) {
		c.log(ctx, cl, res, elapsed)
	}
}

// message composes the call's message (contracts.Catalog.Compose): what
// happened, in the tool's template where one speaks for the outcome or in
// the catalogue's words, and what to do, from the envelope's fields.
func (c *Core) message(st *state, cl *call, o *contracts.Outcome) contracts.Message {
	said := contracts.Said{Args: cl.args, Attempts: cl.attempts, Replay: cl.replay}
	if cl.tool != nil {
		said.Tool, said.Contract = cl.tool.contract.Name, cl.tool.contract
	} else {
		said.Tool = printableName(cl.req.Tool)
		if o.Reason == contracts.ReasonUnknownTool {
			// The names the caller may use, as GET /v1/tools lists them.
			for _, name := range st.snap.ToolNames {
				if st.snap.Access.Allows(cl.req.Caller, name) {
					said.Tools = append(said.Tools, name)
				}
			}
		}
	}
	return st.snap.Catalog.Compose(&said, o)
}

// observationOptions are the observation's bound, the catalogue's language
// for its truncation marker, and the tool's truncation_hint.
func observationOptions(st *state, cl *call) contracts.ObservationOptions {
	opt := contracts.ObservationOptions{MaxChars: st.snap.Server.ObservationMaxChars, Lang: st.snap.Catalog.Lang()}
	if cl.tool != nil {
		opt.Hint = cl.tool.contract.TruncationHint
	}
	return opt
}

// printableName makes an unknown tool name safe to repeat in a message.
func printableName(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
}

func (c *Core) log(ctx context.Context, cl *call, res *Result, elapsed time.Duration) {
	env := &res.Envelope
	attrs := make([]slog.Attr, 0, 12+len(cl.req.LogAttrs))
	attrs = append(attrs,
		slog.String("tool", cl.metricsName()),
		slog.String("status", string(env.Status)),
		slog.String("reason", string(res.Reason)),
		slog.String("caller", cl.caller),
		slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000),
		slog.String("call_id", env.CallID),
		slog.String("front", cl.req.Front),
	)
	if cl.tool != nil {
		attrs = append(attrs, slog.String("upstream", cl.tool.contract.Upstream))
	}
	if cl.upCode != "" {
		attrs = append(attrs, slog.String("upstream_code", cl.upCode), slog.Int("attempts", cl.attempts))
	}
	if env.Replayed {
		attrs = append(attrs, slog.Bool("replayed", true))
	}
	if id := traceID(cl.span); id != "" {
		attrs = append(attrs, slog.String("trace_id", id))
	}
	attrs = append(attrs, cl.req.LogAttrs...)
	c.logger.LogAttrs(ctx, slog.LevelInfo, "call", attrs...)
}

func (cl *call) metricsName() string {
	if cl.tool == nil {
		return "unknown"
	}
	return cl.tool.contract.Name
}
