package soak

// Two toolgate instances on one Redis topology: a 3-primary Cluster whose
// hot slot moves while calls run, a Sentinel-managed primary killed during
// a run, and a rate limit the instances share. Each instance is a Core with
// its own Redis client, built from the policy's state section as `toolgate
// serve` builds it.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/redistest"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/policy/redisstate"
	"github.com/toolgate/toolgate/proxy"
)

// topologyPolicy has a side-effecting tool and a read-only one on a
// backend that counts effects, an unlimited caller and a limited one.
// {{state}} is the state section's body.
const topologyPolicy = `
version: 1
state:
  backend: redis
{{state}}
upstreams:
  effects: {url: "{{url}}", timeout: 500ms}
tools:
  send:
    description: Sends a message once per key.
    upstream: effects
    side_effect: true
    args:
      type: object
      required: [n]
      properties: {n: {type: string}}
    request: {method: POST, path: /send, body: {n: n}}
  read:
    description: Reads items.
    upstream: effects
    args: {type: object}
    request: {method: GET, path: /read}
access:
  default: deny
  callers:
    agent: {tools: ["*"]}
    limited:
      tools: [read]
      rate: {rps: 10, burst: 5}
`

// effectCounter is a backend that counts the effects of each key's send.
type effectCounter struct {
	mu      sync.Mutex
	effects map[string]int
	delay   time.Duration
}

func startEffectCounter(t *testing.T, delay time.Duration) (*effectCounter, string) {
	e := &effectCounter{effects: map[string]int{}, delay: delay}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return e, srv.URL
}

func (e *effectCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		var body struct{ N string }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		e.mu.Lock()
		e.effects[body.N]++
		n := e.effects[body.N]
		e.mu.Unlock()
		time.Sleep(e.delay)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"%s-%d"}`, body.N, n)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"items":[1]}`))
}

// duplicates returns the keys with more than one effect, and the number
// of keys with any.
func (e *effectCounter) duplicates() (dups []string, keys int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for k, n := range e.effects {
		if n > 1 {
			dups = append(dups, fmt.Sprintf("%s×%d", k, n))
		}
	}
	sort.Strings(dups)
	return dups, len(e.effects)
}

// newInstance compiles the policy and builds a Core on the Redis its state
// section names, with the stores `toolgate serve` gives it.
func newInstance(t *testing.T, state, url string) (*proxy.Core, *redisstate.Store) {
	t.Helper()
	doc := strings.NewReplacer("{{state}}", state, "{{url}}", url).Replace(topologyPolicy)
	snap, err := config.CompileSource("topology.yaml", []byte(doc), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	client, err := redisstate.NewClient(snap.State)
	if err != nil {
		t.Fatal(err)
	}
	limiters, err := redisstate.NewRateLimiters(client, redisstate.RateOptions{OnError: snap.State.OnError})
	if err != nil {
		t.Fatal(err)
	}
	store := redisstate.NewStore(client, redisstate.StoreOptions{ConfirmReplicas: snap.State.ConfirmReplicas, ConfirmTimeout: snap.State.ConfirmTimeout})
	core, err := proxy.NewCore(snap, proxy.Options{
		Registry: prometheus.NewRegistry(),
		Store:    store,
		Budgets:  redisstate.NewBudgets(client, redisstate.BudgetOptions{}),
		Limiters: limiters,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(core.Close)
	return core, store
}

// outcomes counts the envelopes a run saw, by a short description.
type outcomes struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *outcomes) add(env *contracts.Envelope) {
	d := fmt.Sprintf("%s/%s", env.Status, env.SideEffect)
	if env.Retryable {
		d += "/retryable"
	}
	if env.Replayed {
		d += "/replayed"
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n == nil {
		o.n = map[string]int{}
	}
	o.n[d]++
}

func (o *outcomes) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var parts []string
	for d, n := range o.n {
		parts = append(parts, fmt.Sprintf("%s=%d", d, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// sendUntilFinal is a careful agent: it sends one key's call, and sends it
// again, same key, while the envelope invites it (retryable), until the
// answer is final or until gives out. It fails the test on an envelope that
// no Redis fault explains.
func sendUntilFinal(t *testing.T, core *proxy.Core, key string, until time.Time, seen *outcomes) {
	for time.Now().Before(until) {
		res := core.Call(context.Background(), &proxy.Request{Tool: "send", Caller: "agent", IdempotencyKey: key, Body: []byte(`{"n":"` + key + `"}`)})
		env := &res.Envelope
		seen.add(env)
		switch {
		case env.Status == contracts.StatusOK:
			return
		case env.Replayed && env.SideEffect == contracts.SideEffectUnknown:
			return // the first call's outcome was lost: kept, never resent
		case env.SideEffect == contracts.SideEffectUnknown && !env.Retryable:
			return // sent, and the deadline passed: the agent must check
		case env.Retryable && env.SideEffect == contracts.SideEffectNone:
			// Redis unavailable, the claim unconfirmed, or the deadline
			// passed waiting for Redis: nothing was sent.
		case env.Status == contracts.StatusTimeout && env.Retryable && env.SideEffect == contracts.SideEffectUnknown:
			// Waited for the key's call in flight past the deadline.
		default:
			t.Errorf("key %s: unexpected envelope %+v", key, env)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestClusterSlotMigrationUnderLoad(t *testing.T) {
	// Fresh keys whose records share the slot of the first, so the moving
	// slot carries live records of concurrent calls: found while the
	// cluster starts.
	const rounds, perRound = 8, 3
	naming := redisstate.NewStore(nil, redisstate.StoreOptions{}) // for its key names only
	recordKey := func(key string) string {
		return naming.Key(policy.IdempotencyKey{Caller: "agent", Tool: "send", Key: key})
	}
	slot := redistest.Slot(recordKey("k1"))
	found := make(chan []int, 1)
	go func() {
		found <- redistest.SameSlot(slot, rounds*perRound, func(i int) string { return recordKey("k" + strconv.Itoa(i)) })
	}()
	cluster := redistest.StartCluster(t, 3)
	counter, url := startEffectCounter(t, 5*time.Millisecond)
	state := "  redis: {cluster: [" + strings.Join(cluster.Addrs(), ", ") + "]}"
	a, _ := newInstance(t, state, url)
	b, _ := newInstance(t, state, url)
	var keys []string
	for _, i := range <-found {
		keys = append(keys, "k"+strconv.Itoa(i))
	}

	ctx := context.Background()
	var moves atomic.Int32
	stop := make(chan struct{})
	migrated := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				migrated <- nil
				return
			default:
			}
			from, err := cluster.Owner(ctx, slot)
			if err == nil {
				err = cluster.MigrateSlot(ctx, slot, (from+1)%len(cluster.Nodes), 5*time.Millisecond)
			}
			if err != nil {
				migrated <- err
				return
			}
			moves.Add(1)
		}
	}()

	// Rounds of fresh keys of the hot slot, every key sent by four agents
	// on the two instances at once.
	var seen outcomes
	for round := range rounds {
		var wg sync.WaitGroup
		for _, key := range keys[round*perRound : (round+1)*perRound] {
			for _, core := range []*proxy.Core{a, b, a, b} {
				wg.Go(func() { sendUntilFinal(t, core, key, time.Now().Add(10*time.Second), &seen) })
			}
		}
		wg.Wait()
	}
	close(stop)
	if err := <-migrated; err != nil {
		t.Fatalf("migration: %v", err)
	}
	dups, effects := counter.duplicates()
	t.Logf("%d slot moves over %d rounds; %d keys with an effect; envelopes: %s", moves.Load(), rounds, effects, seen.String())
	if len(dups) > 0 {
		t.Errorf("keys with two effects: %v", dups)
	}
	if moves.Load() == 0 {
		t.Error("the slot never moved during the load")
	}
}

func TestSentinelFailoverUnderLoad(t *testing.T) {
	for _, confirm := range []int{1, 0} {
		t.Run("confirm_replicas "+strconv.Itoa(confirm), func(t *testing.T) {
			t.Parallel()
			t0 := time.Now()
			s := redistest.StartSentinel(t)
			t.Logf("topology up in %v", time.Since(t0))
			counter, url := startEffectCounter(t, 20*time.Millisecond)
			state := fmt.Sprintf("  redis: {sentinel: {master: %s, addresses: [%s]}}\n  confirm_replicas: %d\n  confirm_timeout: 200ms",
				redistest.SentinelMaster, strings.Join(s.Addrs(), ", "), confirm)
			a, _ := newInstance(t, state, url)
			b, _ := newInstance(t, state, url)

			// A key starts every 10ms on both instances at once, for 2s;
			// the primary dies 600ms in. Each agent retries what is
			// retryable for up to 15s (a claim whose completion died with
			// the primary stays in flight for its lease, 5.5s).
			var seen outcomes
			var wg sync.WaitGroup
			begin := time.Now()
			failedOver := make(chan error, 1)
			go func() {
				time.Sleep(600 * time.Millisecond)
				old := s.Primary.Addr()
				s.Primary.Kill()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				primary, err := s.WaitForFailover(ctx, old)
				if err == nil {
					// The crashed primary comes back as a replica, so
					// that claims can be confirmed again.
					err = s.RestartAsReplicaOf(s.Primary, primary)
				}
				failedOver <- err
			}()
			for i := 0; time.Since(begin) < 2*time.Second; i++ {
				key := "k" + strconv.Itoa(i)
				for _, core := range []*proxy.Core{a, b} {
					wg.Go(func() { sendUntilFinal(t, core, key, time.Now().Add(15*time.Second), &seen) })
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := <-failedOver; err != nil {
				t.Fatal(err)
			}
			t.Logf("failed over and back in %v", time.Since(begin))
			wg.Wait()
			t.Logf("agents done in %v", time.Since(begin))
			dups, effects := counter.duplicates()
			t.Logf("confirm_replicas %d: %d keys with an effect, %d with two or more %v; envelopes: %s",
				confirm, effects, len(dups), dups, seen.String())
			if confirm > 0 && len(dups) > 0 {
				t.Errorf("with confirmed claims, keys with two effects: %v", dups)
			}
		})
	}
}

func TestSharedRateLimit(t *testing.T) {
	srv := redistest.Start(t)
	_, url := startEffectCounter(t, 0)
	a, _ := newInstance(t, "  redis_url: "+srv.URL(), url)
	b, _ := newInstance(t, "  redis_url: "+srv.URL(), url)

	t.Run("two instances allow one caller its rate between them", func(t *testing.T) {
		// 16 agents on two instances call as fast as they are answered for
		// about 2s; the caller's rps 10, burst 5 bounds the total.
		const rps, burst = 10, 5
		var allowed, limited atomic.Int64
		var wg sync.WaitGroup
		begin := time.Now()
		for i := range 16 {
			core := []*proxy.Core{a, b}[i%2]
			wg.Go(func() {
				for time.Since(begin) < 2*time.Second {
					res := core.Call(context.Background(), &proxy.Request{Tool: "read", Caller: "limited", Body: []byte(`{}`)})
					switch {
					case res.Envelope.Status == contracts.StatusOK:
						allowed.Add(1)
					case res.Reason == contracts.ReasonRateLimited:
						limited.Add(1)
						time.Sleep(5 * time.Millisecond)
					default:
						t.Errorf("unexpected envelope %+v", res.Envelope)
						return
					}
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(begin).Seconds()
		// Generous slack: a second of refill on top of the elapsed time.
		bound := burst + rps*(elapsed+1)
		t.Logf("%d calls allowed and %d limited in %.2fs (bound %.0f; per-replica buckets would allow about %.0f)",
			allowed.Load(), limited.Load(), elapsed, bound, 2*(burst+rps*elapsed))
		if n := float64(allowed.Load()); n > bound || n < burst {
			t.Fatalf("%v calls allowed in %.2fs, want between %d and %.0f", n, elapsed, burst, bound)
		}
	})

	t.Run("a Redis error lets a rate check through by default and refuses it with on_error closed", func(t *testing.T) {
		lone := redistest.Start(t)
		open, _ := newInstance(t, "  redis_url: "+lone.URL(), url)
		closed, _ := newInstance(t, "  redis_url: "+lone.URL()+"\n  on_error: closed", url)
		lone.Stop()
		call := func(core *proxy.Core) *proxy.Result {
			return core.Call(context.Background(), &proxy.Request{Tool: "read", Caller: "limited", Body: []byte(`{}`)})
		}
		if res := call(open); res.Envelope.Status != contracts.StatusOK {
			t.Fatalf("on_error open: %+v, want ok (this replica's own bucket)", res.Envelope)
		}
		res := call(closed)
		if env := res.Envelope; env.Status != contracts.StatusUpstream || !env.Retryable || env.SideEffect != contracts.SideEffectNone ||
			res.Reason != contracts.ReasonStoreUnavailable {
			t.Fatalf("on_error closed: %+v (%s), want upstream, retryable, store unavailable", env, res.Reason)
		}
	})
}
