package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/examples"
	"github.com/toolgate/toolgate/internal/testkit/redistest"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/policy/redisstate"
	"github.com/toolgate/toolgate/proxy"
)

var (
	soakDuration  = flag.Duration("soak.duration", 20*time.Second, "how long the load runs against the memory store")
	soakRedis     = flag.Duration("soak.redis-duration", 5*time.Second, "how long the load runs against a Redis store; 0 skips that run")
	soakSeed      = flag.Uint64("soak.seed", 1, "seed of the agents and of the backend's fault schedule")
	soakCallers   = flag.Int("soak.callers", 64, "concurrent agents")
	soakMargin    = flag.Duration("soak.margin", 2*time.Second, "how long past its deadline a call may take to answer")
	soakHeapBound = flag.Int64("soak.heap-bound", 32<<20, "how far the heap may stay above its baseline after the load, in bytes")
)

// toolTimeout is every soak tool's deadline (the upstream's timeout).
const toolTimeout = time.Second

// maxKeys is the memory store's bound in the soak policy: small, so the
// LRU evicts during the run.
const maxKeys = 512

// soakPolicy puts the fault backend behind a read-only tool, a
// side-effecting tool, and a side-effecting tool whose backend dedupes on
// the forwarded key. The breaker opens on bursts; read-only calls are
// retried by toolgate.
const soakPolicy = `
version: 1
server:
  max_request_bytes: 16384
  max_response_bytes: 65536
  observation_max_chars: 600
state: {backend: memory, max_keys: 512}
upstreams:
  faulty:
    url: {{url}}
    timeout: 1s
    max_concurrent: 256
    breaker: {consecutive_failures: 15, failure_ratio: 0.7, min_requests: 200, window: 10s, open_for: 200ms, half_open_requests: 2}
    retries: {attempts: 3, backoff: 10ms, max_backoff: 50ms}
tools:
  lookup:
    description: Look something up.
    upstream: faulty
    cost: 0.001
    args:
      type: object
      required: [q]
      additionalProperties: false
      properties:
        q: {type: string, minLength: 1, maxLength: 200}
        fault: {type: string}
    request: {method: GET, path: /search, query: {q: q, fault: fault}}
    response:
      data: '{"items": body.results, "total": body.total}'
      empty: size(body.results) == 0
  notify:
    description: Record a notification.
    upstream: faulty
    side_effect: true
    cost: 0.01
    args:
      type: object
      required: [nonce, text]
      additionalProperties: false
      properties:
        nonce: {type: string, minLength: 1}
        text: {type: string, minLength: 1}
        fault: {type: string}
    request: {method: POST, path: /send, body: {nonce: nonce, text: text, fault: fault}}
  notify_dedupe:
    description: Record a notification at a backend that dedupes on the key.
    upstream: faulty
    side_effect: true
    cost: 0.01
    idempotency: {forward_header: Idempotency-Key}
    args:
      type: object
      required: [nonce, text]
      additionalProperties: false
      properties:
        nonce: {type: string, minLength: 1}
        text: {type: string, minLength: 1}
        fault: {type: string}
    request: {method: POST, path: /send, body: {nonce: nonce, text: text, fault: fault}}
access: {default: allow}
`

// toolKind is what the expected outcome depends on besides the fault.
type toolKind int

const (
	readOnly         toolKind = iota
	sideEffect                // the backend does not dedupe: an unknown outcome must not be resent
	sideEffectDedupe          // idempotency.forward_header: the backend dedupes on the key
)

var toolKinds = map[string]toolKind{"lookup": readOnly, "notify": sideEffect, "notify_dedupe": sideEffectDedupe}

// outcome is what an envelope says about a call: the three fields the
// mapping table decides.
type outcome struct {
	status    contracts.Status
	retryable bool
	effect    contracts.SideEffect
}

func (o outcome) String() string {
	return fmt.Sprintf("%s/retryable=%v/%s", o.status, o.retryable, o.effect)
}

func envOutcome(env *contracts.Envelope) outcome {
	return outcome{env.Status, env.Retryable, env.SideEffect}
}

const (
	none    = contracts.SideEffectNone
	done    = contracts.SideEffectDone
	unknown = contracts.SideEffectUnknown
)

// attemptOutcome is DESIGN.md section 1's mapping table for one attempt that
// reached the backend and met fault f there. The effect is given as if the
// tool had one; expectedOutcomes clears it for read-only tools.
func attemptOutcome(k toolKind, f examples.FaultKind) outcome {
	// An unknown outcome may be resent by a read-only tool, or when the
	// backend dedupes on the forwarded key.
	unknownRetryable := k != sideEffect
	switch f {
	case examples.FaultNone, examples.FaultDelay, examples.FaultDrip:
		return outcome{contracts.StatusOK, false, done} // 2xx with data
	case examples.FaultStray, examples.FaultCloseEarly:
		// 2xx with data. What the backend did to the connection after the
		// answer (bytes past it, a close) must cost no other call anything:
		// the stray bytes are never read as an answer, and the closed
		// connection is never written on, so every call's envelope still
		// matches the fault its own request met.
		return outcome{contracts.StatusOK, false, done}
	case examples.FaultEmpty:
		if k == readOnly {
			return outcome{contracts.StatusEmpty, false, done} // 2xx, data empty
		}
		return outcome{contracts.StatusOK, false, done} // a write answered 204: it did its job
	case examples.FaultHang:
		return outcome{contracts.StatusTimeout, unknownRetryable, unknown} // our deadline passed after the request was written
	case examples.FaultResetBefore, examples.FaultResetAfter, examples.FaultRefuse:
		return outcome{contracts.StatusUpstream, unknownRetryable, unknown} // reset after the request was written
	case examples.Fault500, examples.Fault502:
		return outcome{contracts.StatusUpstream, unknownRetryable, unknown}
	case examples.Fault504:
		return outcome{contracts.StatusTimeout, unknownRetryable, unknown}
	case examples.Fault503, examples.Fault429:
		return outcome{contracts.StatusUpstream, true, none}
	case examples.Fault404:
		return outcome{contracts.StatusNotFound, false, none}
	case examples.FaultNonJSON, examples.FaultTruncated, examples.FaultOversized:
		return outcome{contracts.StatusUpstream, false, done} // 2xx with an unreadable, non-JSON or oversized body
	}
	panic("soak: no expectation for fault " + string(f))
}

// retriedByToolgate says toolgate itself sends another attempt after o, an
// attempt that reached the backend (retries.attempts permitting): a
// read-only tool resends any retryable failure; a side-effecting one only
// when its backend dedupes and the failure left nothing done (a 503 or 429
// to a write that does not dedupe ends the call: the agent retries).
func retriedByToolgate(k toolKind, o outcome) bool {
	return o.retryable && (k == readOnly || k == sideEffectDedupe && o.effect == none)
}

// notSent is the outcome of an attempt that never reached the backend:
// connection refused, circuit open, bulkhead full.
var notSent = outcome{contracts.StatusUpstream, true, none}

// expectedOutcomes returns every outcome the call may end with, given the
// attempts that reached the backend (in order), whether the backend was
// refusing connections at some point during the call, and how long the
// call took.
func expectedOutcomes(k toolKind, arrivals []examples.Arrival, duringOutage bool, elapsed time.Duration) []outcome {
	var allowed []outcome
	// A further attempt may have been made that never arrived: refused,
	// stopped by the open circuit, or written into a pooled connection the
	// stopping backend was closing (a reset after writing: unknown).
	unsent := func() {
		allowed = append(allowed, notSent)
		if duringOutage {
			allowed = append(allowed, attemptOutcome(k, examples.FaultResetBefore))
		}
	}
	if len(arrivals) == 0 {
		unsent()
	} else {
		last := attemptOutcome(k, arrivals[len(arrivals)-1].Fault)
		if n := len(arrivals); k != readOnly && n > 1 && isReset(arrivals[n-2].Fault) && last.effect == none {
			// toolgate never resends a write after a reset; net/http did,
			// on its own, as it does for requests with an Idempotency-Key.
			// The first write may have acted, whatever the resend met.
			last.effect, last.retryable = unknown, k == sideEffectDedupe
		}
		allowed = append(allowed, last)
		if retriedByToolgate(k, last) {
			unsent()
		}
	}
	if elapsed >= toolTimeout {
		// Our deadline passed: before the request was written (nothing
		// happened), after (unknown), while reading a 2xx body (done), or
		// while waiting for another call with the same key.
		allowed = append(allowed, outcome{contracts.StatusTimeout, true, none})
		if k != readOnly {
			allowed = append(allowed,
				outcome{contracts.StatusTimeout, k == sideEffectDedupe, unknown},
				outcome{contracts.StatusTimeout, false, done},
				outcome{contracts.StatusTimeout, true, unknown})
		}
	}
	if k == readOnly {
		for i := range allowed {
			allowed[i].effect = none // read-only tools always report none
		}
	}
	return allowed
}

func isReset(f examples.FaultKind) bool {
	return f == examples.FaultResetBefore || f == examples.FaultResetAfter || f == examples.FaultRefuse
}

// call is one HTTP call an agent made and what came back.
type call struct {
	tool     string
	kind     toolKind
	callID   string
	invalid  outcome // for a deliberately invalid call: the one answer it may get
	start    time.Time
	elapsed  time.Duration
	httpCode int
	header   http.Header
	env      *contracts.Envelope
}

// sequence is what an agent did for one intent: a read with its retries, or
// one idempotency key with its retries, duplicates and resends.
type sequence struct {
	kind  toolKind
	key   string
	calls []*call
	due   time.Time // checked once late arrivals have landed
}

// run is one soak run: a backend, a toolgate, agents, and what they saw.
type run struct {
	backend *examples.FaultBackend
	front   *httptest.Server
	client  *http.Client

	mu         sync.Mutex
	violations []string
	nViolation int
	statuses   map[contracts.Status]int
	calls      int
	replays    int
	keys       keyStats
	panics     atomic.Int64
	watch      *stallWatch
	excused    atomic.Int64 // late answers while the process was starved
}

// keyStats feed the check that the memory store stays within its bound.
type keyStats struct {
	stored    int // keys with a record the store had to keep
	reclaimed int // dedupe keys taken over again (their record left the LRU without eviction)
}

func (r *run) violate(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nViolation++
	if len(r.violations) < 25 {
		r.violations = append(r.violations, fmt.Sprintf(format, args...))
	}
}

// shortSoak is the memory run's length under -short (make quick) when
// -soak.duration is not given: long enough for every fault kind of the
// schedule to come up, short enough for the quick tier.
const shortSoak = 3 * time.Second

// memoryDuration is how long the memory run lasts: -soak.duration, or
// shortSoak under -short unless the flag is given.
func memoryDuration() time.Duration {
	if !testing.Short() {
		return *soakDuration
	}
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "soak.duration" })
	if given {
		return *soakDuration
	}
	return shortSoak
}

func TestSoak(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		soak(t, "memory", memoryDuration(), func(*testing.T) policy.IdempotencyStore { return nil })
	})
	if *soakRedis <= 0 {
		return
	}
	t.Run("redis", func(t *testing.T) {
		srv := redistest.Start(t)
		soak(t, "redis", *soakRedis, func(*testing.T) policy.IdempotencyStore {
			client := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialerRetries: 1, MaxRetries: 1,
				DialTimeout: time.Second, PoolSize: 4 * *soakCallers})
			return redisstate.NewStore(client, redisstate.StoreOptions{})
		})
	})
}

// soak runs the load for d and checks it, then checks that goroutines and
// heap came back to where they were.
func soak(t *testing.T, store string, d time.Duration, newStore func(*testing.T) policy.IdempotencyStore) {
	runtime.GC()
	baseGoroutines := runtime.NumGoroutine()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseHeap := ms.HeapAlloc

	summary, r := load(t, store, d, newStore(t))
	violations, n := r.violations, r.nViolation
	r = nil

	// Everything the run started is closed: goroutines and heap must come
	// back to their baseline.
	var goroutines int
	deadline := time.Now().Add(15 * time.Second)
	for {
		runtime.GC()
		goroutines = runtime.NumGoroutine()
		if goroutines <= baseGoroutines+2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if goroutines > baseGoroutines+2 {
		var buf bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
		n++
		violations = append(violations, fmt.Sprintf("goroutines: %d after the load, baseline %d:\n%s", goroutines, baseGoroutines, truncate(buf.String(), 6000)))
	}
	runtime.GC()
	runtime.ReadMemStats(&ms)
	heapDelta := int64(ms.HeapAlloc) - int64(baseHeap)
	if heapDelta > *soakHeapBound {
		n++
		violations = append(violations, fmt.Sprintf("heap: %d bytes above the baseline after the load (bound %d)", heapDelta, *soakHeapBound))
	}
	line := fmt.Sprintf("%s goroutines=%+d heap=%+.1fMiB violations=%d", summary, goroutines-baseGoroutines, float64(heapDelta)/(1<<20), n)
	fmt.Println(line)
	t.Log(line)
	for _, v := range violations {
		t.Error(v)
	}
}

// load starts the backend and toolgate, runs the agents for d, waits for
// every check, and closes everything it started.
func load(t *testing.T, store string, d time.Duration, st policy.IdempotencyStore) (string, *run) {
	weights := examples.DefaultFaultWeights()
	weights[examples.FaultRefuse] = 3 // an outage every few seconds at the soak's rate
	backend := examples.NewFaultBackend(examples.FaultOptions{
		Seed:           *soakSeed,
		Weights:        weights,
		BurstMax:       4,
		OversizedBytes: 128 << 10,
		RefuseFor:      150 * time.Millisecond,
	})
	if err := backend.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	doc := strings.ReplaceAll(soakPolicy, "{{url}}", backend.URL())
	snap, err := config.CompileSource("soak.yaml", []byte(doc), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	core, err := proxy.NewCore(snap, proxy.Options{Registry: reg, Store: st})
	if err != nil {
		t.Fatal(err)
	}
	r := &run{backend: backend, statuses: map[contracts.Status]int{}, watch: startStallWatch()}
	r.front = httptest.NewUnstartedServer(core.Handler())
	r.front.Config.ErrorLog = log.New(panicWatch{&r.panics}, "", 0)
	r.front.Start()
	r.client = &http.Client{
		Transport: &http.Transport{MaxIdleConnsPerHost: 4 * *soakCallers, IdleConnTimeout: 30 * time.Second},
		Timeout:   30 * time.Second, // a safety net: the deadline check is far tighter
	}

	ctx, cancel := context.WithTimeout(context.Background(), d)
	var wg sync.WaitGroup
	for i := range *soakCallers {
		a := &agent{r: r, id: i, rng: rand.New(rand.NewPCG(*soakSeed, uint64(i)))}
		wg.Go(func() { a.run(ctx) })
	}
	wg.Wait()
	cancel()

	m := core.Metrics()
	var evicted, stored float64
	for tool := range toolKinds {
		evicted += testutil.ToFloat64(m.IdempotencyEvents.WithLabelValues(tool, proxy.EventEvicted))
		stored += testutil.ToFloat64(m.IdempotencyEvents.WithLabelValues(tool, proxy.EventStored)) +
			testutil.ToFloat64(m.IdempotencyEvents.WithLabelValues(tool, proxy.EventUnknownKept))
	}
	circuitOpen := testutil.ToFloat64(m.UpstreamRequests.WithLabelValues("faulty", "circuit_open"))
	if store == "memory" {
		// The LRU holds at most maxKeys records; every other key that was
		// stored must have left it, by eviction unless it was taken over.
		if floor := r.keys.stored - maxKeys - r.keys.reclaimed; float64(floor) > evicted {
			r.violate("memory store: %d keys stored, bound %d, but only %v evicted", r.keys.stored, maxKeys, evicted)
		}
		if evicted > stored {
			r.violate("memory store: %v evicted of %v stored", evicted, stored)
		}
		if r.keys.stored > 2*maxKeys && evicted == 0 {
			r.violate("memory store: %d keys stored with max_keys %d and nothing evicted", r.keys.stored, maxKeys)
		}
	}
	if d >= 10*time.Second {
		for _, k := range examples.FaultKinds() {
			if backend.Stats().Faults[k] == 0 {
				r.violate("the backend never injected %s", k)
			}
		}
	}
	// Every answer was counted once, under its status.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var counted float64
	for _, mf := range mfs {
		if mf.GetName() == "toolgate_tool_calls_total" {
			for _, m := range mf.GetMetric() {
				counted += m.GetCounter().GetValue()
			}
		}
	}
	if int(counted) != r.calls {
		r.violate("toolgate_tool_calls_total = %v, agents got %d envelopes", counted, r.calls)
	}
	if n := r.panics.Load(); n > 0 {
		r.violate("the agent-facing server logged %d panics", n)
	}

	r.client.CloseIdleConnections()
	r.front.Close()
	core.Close()
	backend.Close()
	r.watch.stop()

	stats := backend.Stats()
	faults := make(map[string]int64, len(stats.Faults))
	for k, v := range stats.Faults {
		faults[string(k)] = v
	}
	statuses := make(map[string]int64, len(r.statuses))
	for k, v := range r.statuses {
		statuses[string(k)] = int64(v)
	}
	stalls, longest := r.watch.summary()
	summary := fmt.Sprintf("soak store=%s seed=%d duration=%s callers=%d calls=%d statuses={%s} replays=%d faults={%s} requests=%d effects=%d deduped=%d outages=%d circuit_open=%v evicted=%v stalls=%d/%v late_excused=%d",
		store, *soakSeed, d, *soakCallers, r.calls, histogram(statuses), r.replays, histogram(faults),
		stats.Requests, stats.Effects, stats.Deduped, stats.Outages, circuitOpen, evicted, stalls, longest.Round(time.Millisecond), r.excused.Load())
	return summary, r
}

func histogram(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || m[keys[i]] == m[keys[j]] && keys[i] < keys[j] })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s:%d", k, m[k])
	}
	return strings.Join(parts, ",")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// panicWatch counts the panics net/http recovers and logs.
type panicWatch struct{ n *atomic.Int64 }

func (p panicWatch) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte("panic")) {
		p.n.Add(1)
	}
	return len(b), nil
}

// agent is one careful caller: it retries only what the envelope says is
// retryable, after retry_after_ms, with the same key and arguments.
type agent struct {
	r       *run
	id      int
	rng     *rand.Rand
	n       int
	pending []*sequence
}

var words = []string{"go", "量子", "retry", "breaker", "idempotency", "observation", "sidecar"}

// namedFaults are the faults an agent may ask for by name; the rest of the
// time the backend's schedule decides. Refusals come from the schedule only,
// so outages stay rare.
var namedFaults = slices.DeleteFunc(examples.FaultKinds(), func(k examples.FaultKind) bool { return k == examples.FaultRefuse })

func (a *agent) run(ctx context.Context) {
	if a.id == 0 {
		// One outage for sure, whatever the schedule draws.
		c := a.call("lookup", map[string]any{"q": "refuse", "fault": string(examples.FaultRefuse)}, "", false)
		a.finish(&sequence{kind: readOnly, calls: []*call{c}})
	}
	for ctx.Err() == nil {
		a.checkDue(time.Now())
		switch x := a.rng.Float64(); {
		case x < 0.45:
			a.read()
		case x < 0.72:
			a.write("notify")
		case x < 0.97:
			a.write("notify_dedupe")
		default:
			a.invalid()
		}
	}
	// Late arrivals land within a deadline plus a margin of a call's end.
	for len(a.pending) > 0 {
		time.Sleep(100 * time.Millisecond)
		a.checkDue(time.Now())
	}
}

func (a *agent) args(extra map[string]any) map[string]any {
	if a.rng.Float64() < 0.1 {
		extra["fault"] = string(namedFaults[a.rng.IntN(len(namedFaults))])
	}
	return extra
}

func (a *agent) read() {
	args := a.args(map[string]any{"q": words[a.rng.IntN(len(words))]})
	seq := &sequence{kind: readOnly}
	for attempt := 0; ; attempt++ {
		c := a.call("lookup", args, "", false)
		seq.calls = append(seq.calls, c)
		if c.env == nil || !c.env.Retryable || attempt == 3 {
			break
		}
		a.wait(c.env, attempt)
	}
	a.finish(seq)
}

func (a *agent) write(tool string) {
	a.n++
	key := fmt.Sprintf("s%d-a%d-%d", *soakSeed, a.id, a.n)
	args := a.args(map[string]any{"nonce": key, "text": "hello from agent " + fmt.Sprint(a.id)})
	keyInArgs := a.rng.Float64() < 0.2 // the key as the idempotency_key argument, as MCP clients send it
	seq := &sequence{kind: toolKinds[tool], key: key}
	for attempt := 0; ; attempt++ {
		var c *call
		if attempt == 0 && a.rng.Float64() < 0.08 {
			// A double fire: the same key twice at once. One call runs,
			// the other waits for it or replays it.
			var twin *call
			var wg sync.WaitGroup
			wg.Go(func() { twin = a.call(tool, args, key, keyInArgs) })
			c = a.call(tool, args, key, keyInArgs)
			wg.Wait()
			seq.calls = append(seq.calls, twin)
		} else {
			c = a.call(tool, args, key, keyInArgs)
		}
		seq.calls = append(seq.calls, c)
		if c.env == nil || !c.env.Retryable || attempt == 3 {
			if c.env != nil && c.env.SideEffect == done && a.rng.Float64() < 0.15 {
				// The answer was lost on the agent's side: the same call
				// again must be a replay.
				seq.calls = append(seq.calls, a.call(tool, args, key, keyInArgs))
			}
			break
		}
		a.wait(c.env, attempt)
	}
	a.finish(seq)
}

// invalid sends a call that must be refused before anything is sent.
func (a *agent) invalid() {
	var c *call
	badArgs := outcome{contracts.StatusBadArgs, false, none}
	switch a.rng.IntN(4) {
	case 0:
		c = a.call("lookup", map[string]any{"q": ""}, "", false)
		c.invalid = badArgs
	case 1:
		c = a.call("notify", map[string]any{"nonce": "x", "text": "no key"}, "", false)
		c.invalid = badArgs
	case 2:
		c = a.call("no_such_tool", map[string]any{}, "", false)
		c.invalid = outcome{contracts.StatusNotFound, false, none}
	default:
		c = a.callRaw("lookup", []byte(`{"q":"x","q":"y"}`), "", false)
		c.invalid = badArgs
	}
	a.finish(&sequence{kind: readOnly, calls: []*call{c}})
}

// wait sleeps as the envelope asks, or a short backoff.
func (a *agent) wait(env *contracts.Envelope, attempt int) {
	d := time.Duration(env.RetryAfterMS) * time.Millisecond
	if d == 0 {
		d = time.Duration(10<<attempt) * time.Millisecond
	}
	time.Sleep(min(d, time.Second))
}

func (a *agent) call(tool string, args map[string]any, key string, keyInArgs bool) *call {
	if keyInArgs && key != "" {
		args = withArg(args, contracts.IdempotencyKeyArg, key)
	}
	body, err := json.Marshal(args)
	if err != nil {
		panic(err)
	}
	return a.callRaw(tool, body, key, keyInArgs)
}

func withArg(m map[string]any, k string, v any) map[string]any {
	out := make(map[string]any, len(m)+1)
	for kk, vv := range m {
		out[kk] = vv
	}
	out[k] = v
	return out
}

var callSeq atomic.Int64

func (a *agent) callRaw(tool string, body []byte, key string, keyInArgs bool) *call {
	r := a.r
	c := &call{tool: tool, kind: toolKinds[tool], callID: fmt.Sprintf("soak-%d-%d", a.id, callSeq.Add(1))}
	req, err := http.NewRequest(http.MethodPost, r.front.URL+"/v1/tools/"+tool, bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	req.Header.Set("X-Request-Id", c.callID)
	req.Header.Set("Content-Type", "application/json")
	if key != "" && !keyInArgs {
		req.Header.Set("Idempotency-Key", key)
	}
	c.start = time.Now()
	resp, err := r.client.Do(req)
	if err != nil {
		c.elapsed = time.Since(c.start)
		r.violate("%s %s: no answer: %v", tool, c.callID, err)
		return c
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	c.elapsed = time.Since(c.start)
	c.httpCode, c.header = resp.StatusCode, resp.Header
	if err != nil {
		r.violate("%s %s: answer cut: %v", tool, c.callID, err)
		return c
	}
	env, err := contracts.DecodeEnvelope(bytes.TrimSpace(raw))
	if err != nil {
		r.violate("%s %s: HTTP %d without an envelope: %v: %.200s", tool, c.callID, resp.StatusCode, err, raw)
		return c
	}
	c.env = env
	r.mu.Lock()
	r.calls++
	r.statuses[env.Status]++
	if env.Replayed {
		r.replays++
	}
	r.mu.Unlock()
	a.wellFormed(c, raw)
	return c
}

// wellFormed checks what one answer must be on its own, whatever the fault.
func (a *agent) wellFormed(c *call, raw []byte) {
	r, env := a.r, c.env
	bad := func(format string, args ...any) {
		r.violate("%s %s: %s (envelope %s)", c.tool, c.callID, fmt.Sprintf(format, args...), truncate(string(raw), 300))
	}
	if ct := c.header.Get("Content-Type"); ct != "application/json" {
		bad("Content-Type %q", ct)
	}
	if got := c.header.Get("Toolgate-Status"); got != string(env.Status) {
		bad("Toolgate-Status %q", got)
	}
	if (c.header.Get("Idempotent-Replayed") == "true") != env.Replayed {
		bad("Idempotent-Replayed header disagrees with replayed")
	}
	want := map[contracts.Status][]int{
		contracts.StatusOK: {200}, contracts.StatusEmpty: {200}, contracts.StatusBadArgs: {400},
		contracts.StatusForbidden: {403}, contracts.StatusNotFound: {404}, contracts.StatusTimeout: {504},
		contracts.StatusUpstream: {502, 503},
	}[env.Status]
	if !slices.Contains(want, c.httpCode) {
		bad("HTTP %d for %s", c.httpCode, env.Status)
	}
	if c.httpCode == 503 && (!env.Retryable || env.SideEffect != none) {
		bad("503 for a call that did something or may not be retried")
	}
	// Retry-After is the envelope's wait, and absent without one.
	if got := c.header.Get("Retry-After"); (got != "") != (env.RetryAfterMS > 0) || got != "" && got != contracts.RetryAfterHeader(env.RetryAfterMS) {
		bad("Retry-After %q for retry_after_ms %d", got, env.RetryAfterMS)
	}
	if env.Status == contracts.StatusUpstream && env.Retryable && env.SideEffect == none && c.kind != readOnly && c.httpCode != 503 {
		bad("upstream, retryable, nothing done, but HTTP %d", c.httpCode)
	}
	if c.kind == readOnly && env.SideEffect != none {
		bad("a read-only tool reported side_effect %s", env.SideEffect)
	}
	if env.CallID != c.callID || env.Tool != c.tool {
		bad("call_id %q tool %q", env.CallID, env.Tool)
	}
	if env.Replayed && env.Cost != 0 {
		bad("a replay cost %v", env.Cost)
	}
	if env.RetryAfterMS < 0 || (env.RetryAfterMS > 0 && !env.Retryable && env.Status != contracts.StatusForbidden) {
		bad("retry_after_ms %d on a call that may not be retried", env.RetryAfterMS)
	}
	if !strings.HasPrefix(env.Observation, env.Status.Tag()+" "+env.Message) || !utf8.ValidString(env.Observation) {
		bad("observation does not start with the tag and message")
	}
	if env.Message == "" || strings.Contains(env.Message, "\n") {
		bad("message is empty or more than one line")
	}
	for _, leak := range []string{examples.FaultInternalHost, "127.0.0.1", "java.", "<html", "eff_"} {
		if leak == "eff_" && c.kind != readOnly {
			continue // a write's data carries the backend's id, as the contract shapes it
		}
		if strings.Contains(env.Message, leak) || strings.Contains(env.Observation, leak) {
			bad("message or observation leaks %q", leak)
		}
	}
}

func (a *agent) finish(seq *sequence) {
	seq.due = time.Now().Add(toolTimeout + *soakMargin)
	a.pending = append(a.pending, seq)
}

// checkDue checks the sequences whose late arrivals have landed.
func (a *agent) checkDue(now time.Time) {
	i := 0
	for ; i < len(a.pending) && !a.pending[i].due.After(now); i++ {
		a.check(a.pending[i])
		a.pending[i] = nil
	}
	a.pending = a.pending[i:]
}

// check compares every call of a sequence with the fault the backend
// really injected, and the key's side effects with what the envelopes said.
func (a *agent) check(seq *sequence) {
	r := a.r
	b := r.backend
	outages := b.Outages()
	forget := make([]string, 0, len(seq.calls)+1)
	var original []outcome // non-replayed envelopes of this key
	ownEffects := map[*call]int{}
	nonReplayed := 0
	storedKey := false
	for _, c := range seq.calls {
		arrivals := b.Arrivals(c.callID)
		forget = append(forget, c.callID)
		for _, ar := range arrivals {
			if ar.Effect {
				ownEffects[c]++
			}
		}
		if c.elapsed > toolTimeout+*soakMargin {
			if r.watch.overlaps(c.start, c.start.Add(c.elapsed)) {
				r.excused.Add(1) // the whole process was starved meanwhile, not the call
			} else {
				r.violate("%s %s: answered after %v, deadline %v", c.tool, c.callID, c.elapsed.Round(time.Millisecond), toolTimeout)
			}
		}
		if c.env == nil {
			continue
		}
		got := envOutcome(c.env)
		switch {
		case c.invalid != (outcome{}):
			if got != c.invalid || len(arrivals) > 0 {
				r.violate("%s %s: invalid call answered %s with %d backend requests, want %s and none", c.tool, c.callID, got, len(arrivals), c.invalid)
			}
		case c.env.Replayed:
			if len(arrivals) > 0 {
				r.violate("%s %s: replayed, yet the backend was called %d times", c.tool, c.callID, len(arrivals))
			}
			if got.retryable && got.effect == none {
				r.violate("%s %s: replayed a retryable result with side_effect none (%s): the retry the envelope invites can never run", c.tool, c.callID, got)
			}
		default:
			nonReplayed++
			original = append(original, got)
			if c.kind != readOnly && c.env.Cost > 0 && !(got.retryable && got.effect == none) {
				storedKey = true
			}
			allowed := expectedOutcomes(c.kind, arrivals, overlaps(outages, c), c.elapsed)
			if !slices.Contains(allowed, got) {
				faults := make([]string, len(arrivals))
				for i, ar := range arrivals {
					faults[i] = string(ar.Fault)
				}
				r.violate("%s %s: answered %s after faults [%s] (%v, outage %v), want one of %v: %s",
					c.tool, c.callID, got, strings.Join(faults, " "), c.elapsed.Round(time.Millisecond), overlaps(outages, c), allowed, c.env.Message)
			}
			if c.kind != readOnly && got.effect == none && ownEffects[c] > 0 {
				r.violate("%s %s: side_effect none, but the call performed %d effects", c.tool, c.callID, ownEffects[c])
			}
		}
	}
	if seq.key != "" {
		for _, c := range seq.calls {
			if c.env != nil && c.env.Replayed && !slices.Contains(original, envOutcome(c.env)) &&
				envOutcome(c.env) != (outcome{contracts.StatusTimeout, false, unknown}) {
				r.violate("%s %s: replayed %s, which no call with key %s answered (%v)", c.tool, c.callID, envOutcome(c.env), seq.key, original)
			}
		}
		effects := b.Effects(seq.key)
		forget = append(forget, seq.key)
		if effects > 1 {
			r.violate("key %s: %d side effects", seq.key, effects)
		}
		for _, c := range seq.calls {
			if c.env != nil && c.env.SideEffect == done && effects != 1 {
				r.violate("key %s: %s said done, but %d side effects happened", seq.key, c.callID, effects)
			}
		}
		r.mu.Lock()
		if storedKey {
			r.keys.stored++
			if seq.kind == sideEffectDedupe && nonReplayed > 1 {
				r.keys.reclaimed++
			}
		}
		r.mu.Unlock()
	}
	b.Forget(forget...)
}

// overlaps says the backend refused connections at some point while the
// call ran.
func overlaps(outages []examples.Outage, c *call) bool {
	from, to := c.start.Add(-50*time.Millisecond), c.start.Add(c.elapsed+50*time.Millisecond)
	for _, o := range outages {
		end := o.To
		if end.IsZero() {
			end = time.Now()
		}
		if o.From.Before(to) && end.After(from) {
			return true
		}
	}
	return false
}

// stallWatch notices when the whole test process was starved of CPU (by
// another job on the machine, or a long pause): a goroutine that wakes every
// 20ms and records the spans in which it could not. A late answer inside
// such a span says nothing about toolgate; a toolgate lock or a missed
// deadline would not delay this goroutine.
type stallWatch struct {
	mu     sync.Mutex
	spans  [][2]time.Time
	quit   chan struct{}
	done   chan struct{}
	period time.Duration
}

// stallThreshold is how late the watch may wake before a span counts.
const stallThreshold = 300 * time.Millisecond

func startStallWatch() *stallWatch {
	w := &stallWatch{quit: make(chan struct{}), done: make(chan struct{}), period: 20 * time.Millisecond}
	go func() {
		defer close(w.done)
		last := time.Now()
		for {
			select {
			case <-w.quit:
				return
			case <-time.After(w.period):
			}
			now := time.Now()
			if now.Sub(last) > w.period+stallThreshold {
				w.mu.Lock()
				w.spans = append(w.spans, [2]time.Time{last, now})
				w.mu.Unlock()
			}
			last = now
		}
	}()
	return w
}

func (w *stallWatch) stop() {
	close(w.quit)
	<-w.done
}

// overlaps says the process was starved at some point between from and to.
func (w *stallWatch) overlaps(from, to time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.spans {
		if s[0].Before(to) && s[1].After(from) {
			return true
		}
	}
	return false
}

func (w *stallWatch) summary() (n int, longest time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.spans {
		longest = max(longest, s[1].Sub(s[0]))
	}
	return len(w.spans), longest
}
