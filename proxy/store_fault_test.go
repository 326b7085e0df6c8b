package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/proxytest"
	"github.com/toolgate/toolgate/internal/testkit/redistest"
	"github.com/toolgate/toolgate/policy/redisstate"
)

// faultPolicy has a side-effecting tool with a cost, one on a dead
// upstream, and a caller whose budget is three calls.
const faultPolicy = `
version: 1
upstreams:
  svc:
    url: {{url}}
    timeout: 1s
  dead:
    url: {{dead}}
    timeout: 1s
tools:
  send:
    description: Send something.
    upstream: svc
    side_effect: true
    cost: 1
    args: {type: object, required: [mode, nonce], properties: {mode: {type: string}, nonce: {type: string}}}
    request: {method: POST, path: "/w/{mode}", body: {nonce: nonce}}
    response: {data: '{"id": body.id}'}
  send_dead:
    description: Send something to a backend that is down.
    upstream: dead
    side_effect: true
    cost: 1
    args: {type: object, required: [nonce], properties: {nonce: {type: string}}}
    request: {method: POST, path: /w, body: {nonce: nonce}}
access:
  default: deny
  callers:
    payer: {tools: ["*"], budget: {cost: 3, per: 1h}}
`

// faultBackend counts effects per nonce. Mode "busy" answers 503 without
// acting to the first request of a nonce; mode "stall" stalls the Redis
// proxy before it answers, so the write that settles the call meets a
// stalled store.
type faultBackend struct {
	mu      sync.Mutex
	effects map[string]int
	seen    map[string]bool
	onStall func()
}

func (b *faultBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Nonce string `json:"nonce"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	mode := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	b.mu.Lock()
	first := !b.seen[body.Nonce]
	b.seen[body.Nonce] = true
	if mode == "busy" && first {
		b.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	b.effects[body.Nonce]++
	n := b.effects[body.Nonce]
	b.mu.Unlock()
	if mode == "stall" {
		b.onStall()
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"id":"%s-%d"}`, body.Nonce, n)
}

func (b *faultBackend) count(nonce string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.effects[nonce]
}

// faultHarness is a core whose idempotency records and budgets live in a
// real Redis reached through a fault proxy, with toolgate's client options.
type faultHarness struct {
	core    *Core
	front   *httptest.Server
	proxy   *redistest.FaultProxy
	direct  *redis.Client
	backend *faultBackend
}

func newFaultHarness(t *testing.T) *faultHarness {
	t.Helper()
	srv := redistest.Start(t)
	p := redistest.StartFaultProxy(t, srv.Addr())
	b := &faultBackend{effects: map[string]int{}, seen: map[string]bool{}, onStall: func() {}}
	backend := httptest.NewServer(b)
	t.Cleanup(backend.Close)
	doc := strings.NewReplacer("{{url}}", backend.URL, "{{dead}}", proxytest.RefusedURL(t)).Replace(faultPolicy)
	opts, err := redisstate.ClientOptions("redis://" + p.Addr() + "/0")
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opts)
	core := newTestCore(t, doc, Options{
		Store:   redisstate.NewStore(client, redisstate.StoreOptions{}),
		Budgets: redisstate.NewBudgets(client, redisstate.BudgetOptions{}),
	})
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { direct.Close() })
	return &faultHarness{core: core, front: serveCore(t, core), proxy: p, direct: direct, backend: b}
}

func (h *faultHarness) send(t *testing.T, tool, key, args string) *contracts.Envelope {
	t.Helper()
	_, env := postCall(t, h.front, tool, args, map[string]string{"Idempotency-Key": key, "X-Toolgate-Caller": "payer"})
	return env
}

// spent is what the caller's budget windows hold, in cost units.
func (h *faultHarness) spent(t *testing.T) float64 {
	t.Helper()
	keys, err := h.direct.Keys(t.Context(), redisstate.DefaultBudgetPrefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var units int64
	for _, k := range keys {
		if strings.Contains(k, ":charge:") {
			continue
		}
		n, err := h.direct.Get(t.Context(), k).Int64()
		if err != nil {
			t.Fatalf("GET %s: %v", k, err)
		}
		units += n
	}
	return float64(units) / 1e6
}

// storeErrors counts the store errors the core met.
func (h *faultHarness) storeErrors() float64 {
	var n float64
	for _, op := range []string{"claim", "complete", "wait", "budget"} {
		n += testutil.ToFloat64(h.core.Metrics().IdempotencyStoreErr.WithLabelValues(op))
	}
	return n
}

func isScript(name string) func(redistest.Command) bool {
	return redistest.ScriptContaining("-- toolgate " + name + "\n")
}

func TestLostStoreRepliesActOnce(t *testing.T) {
	ok := outcomeOf(contracts.StatusOK, false, contracts.SideEffectDone)
	for _, tc := range []struct {
		name   string
		script string
		fault  redistest.Fault
		mode   string // the first call's mode: busy answers 503 once
		spent  float64
		first  outcome // of the first call; a retry with the same key follows
	}{
		{"a lost claim reply: the call owns its own claim", "idempotency: claim", redistest.CutReply, "ok", 1, ok},
		{"a lost claim request: the client's retry claims once", "idempotency: claim", redistest.CutRequest, "ok", 1, ok},
		{"a lost completion reply: the record is stored once", "idempotency: finish", redistest.CutReply, "ok", 1, ok},
		{"a lost release reply: the retry the 503 invites runs", "idempotency: release", redistest.CutReply, "busy", 2,
			outcomeOf(contracts.StatusUpstream, true, contracts.SideEffectNone)},
		{"a lost spend reply: the call is charged once", "budget: spend", redistest.CutReply, "ok", 1, ok},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newFaultHarness(t)
			in := h.proxy.Add(redistest.Rule{Match: isScript(tc.script), Fault: tc.fault, Times: 1})
			args := `{"mode":"` + tc.mode + `","nonce":"n1"}`
			first := h.send(t, "send", "k1", args)
			if got := envOutcome(first); got != tc.first || first.Replayed {
				t.Fatalf("first call = %v (replayed %v): %s; want %v", got, first.Replayed, first.Message, tc.first)
			}
			if h.proxy.Applied(in) != 1 {
				t.Fatal("the fault was not injected")
			}
			again := h.send(t, "send", "k1", args)
			if got := envOutcome(again); got != ok {
				t.Fatalf("the retry = %v: %s; want ok/done", got, again.Message)
			}
			if tc.mode == "ok" && !again.Replayed {
				t.Error("the retry of a completed call was not a replay")
			}
			if n := h.backend.count("n1"); n != 1 {
				t.Errorf("the backend acted %d times, want once", n)
			}
			if got := h.spent(t); got != tc.spent {
				t.Errorf("the caller spent %v, want %v", got, tc.spent)
			}
			if n := h.storeErrors(); n != 0 {
				t.Errorf("%v store errors, want none", n)
			}
		})
	}

	t.Run("a lost refund reply gives the charge back once: three calls on a budget of three", func(t *testing.T) {
		h := newFaultHarness(t)
		if env := h.send(t, "send", "k1", `{"mode":"ok","nonce":"a"}`); env.Status != contracts.StatusOK {
			t.Fatalf("first call: %+v", env)
		}
		in := h.proxy.Add(redistest.Rule{Match: isScript("budget: refund"), Fault: redistest.CutReply, Times: 1})
		dead := h.send(t, "send_dead", "k2", `{"nonce":"b"}`)
		if got := envOutcome(dead); got != outcomeOf(contracts.StatusUpstream, true, contracts.SideEffectNone) {
			t.Fatalf("call to a dead backend = %v: %s", got, dead.Message)
		}
		if h.proxy.Applied(in) != 1 {
			t.Fatal("the fault was not injected")
		}
		if got := h.spent(t); got != 1 {
			t.Fatalf("the caller spent %v after one call and one refund, want 1", got)
		}
		calls := 1
		for i := range 5 {
			env := h.send(t, "send", "more-"+strconv.Itoa(i), `{"mode":"ok","nonce":"more-`+strconv.Itoa(i)+`"}`)
			if env.Status == contracts.StatusForbidden {
				break
			}
			calls++
		}
		if calls != 3 {
			t.Fatalf("the caller made %d calls on a budget of 3", calls)
		}
	})
}

// outcome is what an envelope says about a call.
type outcome struct {
	status    contracts.Status
	retryable bool
	effect    contracts.SideEffect
}

func outcomeOf(s contracts.Status, retryable bool, e contracts.SideEffect) outcome {
	return outcome{s, retryable, e}
}

func envOutcome(env *contracts.Envelope) outcome {
	return outcome{env.Status, env.Retryable, env.SideEffect}
}

func (o outcome) String() string {
	return fmt.Sprintf("%s/retryable=%v/%s", o.status, o.retryable, o.effect)
}

// TestStalledStoreAnswersNearTheDeadline stalls Redis for 5s around a call
// of a 1s tool: the call answers within its deadline and a margin (1.25s
// documented; 4s asserted, generously), and once Redis is back the key
// holds the truth, so a retry with it does the right thing.
func TestStalledStoreAnswersNearTheDeadline(t *testing.T) {
	const stall = 5 * time.Second
	const bound = 4 * time.Second // deadline 1s + documented margin 1.25s, and room for a busy machine
	for _, tc := range []struct {
		name string
		mode string
		// before: the stall begins before the call; otherwise when the
		// backend has acted, before the call is settled.
		before bool
		first  outcome
		// replayed: the retry after the stall is a replay of the first
		// call (which acted); otherwise it runs.
		replayed bool
	}{
		{"a stall before the claim: nothing is sent, nothing is left in flight", "ok", true,
			outcomeOf(contracts.StatusUpstream, true, contracts.SideEffectNone), false},
		{"a stall after the backend acted: the answer is not held, the record lands", "stall", false,
			outcomeOf(contracts.StatusOK, false, contracts.SideEffectDone), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newFaultHarness(t)
			var resumed sync.WaitGroup
			resumed.Add(1)
			stallNow := func() {
				h.proxy.Stall()
				time.AfterFunc(stall, func() {
					h.proxy.Resume()
					resumed.Done()
				})
			}
			h.backend.onStall = stallNow
			// A running instance: connections to Redis exist, and Redis
			// (and the proxy) know the scripts.
			if env := h.send(t, "send", "warm-up", `{"mode":"ok","nonce":"warm-up"}`); env.Status != contracts.StatusOK {
				t.Fatalf("warm-up call: %+v", env)
			}
			if tc.before {
				stallNow()
			}
			nonce := "n-" + tc.mode
			args := `{"mode":"` + tc.mode + `","nonce":"` + nonce + `"}`
			began := time.Now()
			first := h.send(t, "send", "k-"+tc.mode, args)
			took := time.Since(began)
			t.Logf("a 1s tool answered after %v with Redis stalled", took.Round(time.Millisecond))
			if took >= bound {
				t.Errorf("a 1s tool answered after %v with Redis stalled", took.Round(time.Millisecond))
			}
			if got := envOutcome(first); got != tc.first {
				t.Fatalf("first call = %v: %s; want %v", got, first.Message, tc.first)
			}
			resumed.Wait()
			var again *contracts.Envelope
			deadline := time.Now().Add(5 * time.Second)
			for {
				again = h.send(t, "send", "k-"+tc.mode, args)
				if again.Status != contracts.StatusUpstream || !again.Retryable || again.SideEffect != contracts.SideEffectNone || time.Now().After(deadline) {
					break // a store error while the proxy's held bytes drain: try again
				}
				time.Sleep(50 * time.Millisecond)
			}
			if got := envOutcome(again); got != outcomeOf(contracts.StatusOK, false, contracts.SideEffectDone) || again.Replayed != tc.replayed {
				t.Fatalf("the retry after the stall = %v (replayed %v): %s; want ok/done, replayed %v", got, again.Replayed, again.Message, tc.replayed)
			}
			if n := h.backend.count(nonce); n != 1 {
				t.Fatalf("the backend acted %d times, want once", n)
			}
		})
	}
}
