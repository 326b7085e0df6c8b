package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/redistest"
	"github.com/toolgate/toolgate/policy"
	"github.com/toolgate/toolgate/policy/redisstate"
	"github.com/toolgate/toolgate/proxy"
)

// redisFaults are the faults the soak injects between toolgate and Redis,
// into the commands that run the stores' scripts.
type redisFaults struct {
	cutReply, cutRequest, delay *redistest.Injection
}

// injectRedisFaults makes the proxy lose the reply to 15% of script calls
// (they ran), lose 5% before they reach Redis, and delay the reply of 5% by
// 50ms, drawn from a source seeded by -soak.seed.
func injectRedisFaults(p *redistest.FaultProxy, seed uint64) redisFaults {
	rng := rand.New(rand.NewPCG(seed, 0x7ed15))
	script := redistest.ScriptContaining("-- toolgate ")
	draw := func(p float64) func(redistest.Command) bool {
		// Match runs under the proxy's lock: rng needs no lock of its own.
		return func(c redistest.Command) bool { return script(c) && rng.Float64() < p }
	}
	return redisFaults{
		cutReply:   p.Add(redistest.Rule{Match: draw(0.15), Fault: redistest.CutReply}),
		cutRequest: p.Add(redistest.Rule{Match: draw(0.05 / 0.85), Fault: redistest.CutRequest}),
		delay:      p.Add(redistest.Rule{Match: draw(0.05 / 0.80), Fault: redistest.DelayReply, Delay: 50 * time.Millisecond}),
	}
}

func (f redisFaults) summary(p *redistest.FaultProxy) string {
	return fmt.Sprintf("redis faults: %d replies cut, %d requests cut, %d replies delayed",
		p.Applied(f.cutReply), p.Applied(f.cutRequest), p.Applied(f.delay))
}

// faultyRedisClient reaches Redis through p with toolgate's client options.
// Retries are generous: a command fails only after six lost replies in a
// row, so the run checks what retries do, not how often they run out.
func faultyRedisClient(t *testing.T, p *redistest.FaultProxy) *redis.Client {
	t.Helper()
	opts, err := redisstate.ClientOptions("redis://" + p.Addr() + "/0")
	if err != nil {
		t.Fatal(err)
	}
	opts.MaxRetries = 5
	opts.PoolSize = 4 * *soakCallers
	return redis.NewClient(opts)
}

// TestSoakRedisFaults runs the soak against a Redis store whose replies are
// lost, whose requests are lost and whose replies come late: every check of
// the soak holds (no key acts twice, every envelope matches what the
// backend did, no answer comes later than its deadline and the margin).
func TestSoakRedisFaults(t *testing.T) {
	if *soakRedis <= 0 {
		t.Skip("-soak.redis-duration is 0")
	}
	srv := redistest.Start(t)
	p := redistest.StartFaultProxy(t, srv.Addr())
	faults := injectRedisFaults(p, *soakSeed)
	soak(t, "redis-faults", *soakRedis, func(t *testing.T) policy.IdempotencyStore {
		return redisstate.NewStore(faultyRedisClient(t, p), redisstate.StoreOptions{})
	})
	line := faults.summary(p)
	fmt.Println(line)
	t.Log(line)
	if p.Applied(faults.cutReply) == 0 || p.Applied(faults.cutRequest) == 0 {
		t.Error("the run injected no Redis faults")
	}
}

// onceBackend acts once per request and counts effects by nonce; it never
// fails, so any unknown outcome a caller sees is false.
type onceBackend struct {
	mu      sync.Mutex
	effects map[string]int
}

func (b *onceBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Nonce string `json:"nonce"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	b.mu.Lock()
	b.effects[body.Nonce]++
	n := b.effects[body.Nonce]
	b.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"id":"%s-%d"}`, body.Nonce, n)
}

// unrefundedCharges is a log handler that counts the charges toolgate could
// not give back: a refund that failed, or a failed spend whose withdrawal
// failed too.
type unrefundedCharges struct{ n atomic.Int64 }

func (u *unrefundedCharges) Enabled(context.Context, slog.Level) bool { return true }
func (u *unrefundedCharges) WithAttrs([]slog.Attr) slog.Handler       { return u }
func (u *unrefundedCharges) WithGroup(string) slog.Handler            { return u }

func (u *unrefundedCharges) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "budget refund failed" {
		u.n.Add(1)
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "err" && strings.Contains(a.Value.String(), "withdrawing the charge failed") {
			u.n.Add(1)
		}
		return true
	})
	return nil
}

// keyVerdict is what the envelopes of one key said.
type keyVerdict struct {
	key     string
	done    bool
	data    []byte
	unknown *contracts.Envelope // an unknown outcome, but a twin's wait
}

const oncePolicy = `
version: 1
upstreams:
  svc: {url: {{url}}, timeout: 1s}
tools:
  send:
    description: Send something.
    upstream: svc
    side_effect: true
    cost: 0.01
    args: {type: object, required: [nonce], additionalProperties: false, properties: {nonce: {type: string}}}
    request: {method: POST, path: /send, body: {nonce: nonce}}
    response: {data: '{"id": body.id}'}
access:
  default: deny
  callers:
    soak: {tools: [send], budget: {cost: 1000000, per: 24h}}
`

// TestSoakRedisFaultsActOnce drives a backend that never fails through a
// toolgate whose idempotency records and budget live in a Redis that loses
// and delays replies. Agents retry what the envelope says is retryable,
// double-fire keys and replay answers they "lost". No key may act twice; a
// key whose envelope says unknown must have reached the backend (the
// backend never fails, so an unknown it never saw could only come from the
// store: a call waiting for its own claim); every key ends done or unknown;
// every replay carries the original's data; and the budget holds exactly
// one charge per effect.
func TestSoakRedisFaultsActOnce(t *testing.T) {
	if *soakRedis <= 0 {
		t.Skip("-soak.redis-duration is 0")
	}
	srv := redistest.Start(t)
	p := redistest.StartFaultProxy(t, srv.Addr())
	faults := injectRedisFaults(p, *soakSeed+1)
	b := &onceBackend{effects: map[string]int{}}
	backend := httptest.NewServer(b)
	defer backend.Close()
	snap, err := config.CompileSource("once.yaml", []byte(strings.ReplaceAll(oncePolicy, "{{url}}", backend.URL)), config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	client := faultyRedisClient(t, p)
	reg := prometheus.NewRegistry()
	var unrefunded unrefundedCharges
	core, err := proxy.NewCore(snap, proxy.Options{
		Logger:   slog.New(&unrefunded),
		Registry: reg,
		Store:    redisstate.NewStore(client, redisstate.StoreOptions{}),
		Budgets:  redisstate.NewBudgets(client, redisstate.BudgetOptions{}),
	})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(core.Handler())
	httpClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * *soakCallers}, Timeout: 30 * time.Second}
	watch := startStallWatch()
	var (
		mu         sync.Mutex
		violations []string
		verdicts   []keyVerdict
		calls      atomic.Int64
		late       atomic.Int64
	)
	violate := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(violations) < 25 {
			violations = append(violations, fmt.Sprintf(format, args...))
		}
	}
	send := func(key string) *contracts.Envelope {
		calls.Add(1)
		req, _ := http.NewRequest(http.MethodPost, front.URL+"/v1/tools/send", strings.NewReader(`{"nonce":"`+key+`"}`))
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("X-Toolgate-Caller", "soak")
		began := time.Now()
		resp, err := httpClient.Do(req)
		if err != nil {
			violate("%s: no answer: %v", key, err)
			return nil
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if took := time.Since(began); took > toolTimeout+*soakMargin && !watch.overlaps(began, time.Now()) {
			late.Add(1)
			violate("%s: answered after %v, deadline %v", key, took.Round(time.Millisecond), toolTimeout)
		}
		env, err := contracts.DecodeEnvelope(bytes.TrimSpace(raw))
		if err != nil {
			violate("%s: HTTP %d without an envelope: %.200s", key, resp.StatusCode, raw)
			return nil
		}
		return env
	}

	ctx, cancel := context.WithTimeout(context.Background(), *soakRedis)
	defer cancel()
	var wg sync.WaitGroup
	for agent := range *soakCallers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(*soakSeed, uint64(agent)))
			for n := 0; ctx.Err() == nil; n++ {
				key := fmt.Sprintf("a%d-%d", agent, n)
				var envs []*contracts.Envelope
				twins := false
				for attempt := 0; attempt < 20; attempt++ {
					var env *contracts.Envelope
					if attempt == 0 && rng.Float64() < 0.1 {
						twins = true
						var twin *contracts.Envelope
						var both sync.WaitGroup
						both.Go(func() { twin = send(key) })
						env = send(key)
						both.Wait()
						envs = append(envs, twin)
					} else {
						env = send(key)
					}
					envs = append(envs, env)
					if env == nil || !env.Retryable {
						break
					}
					time.Sleep(min(time.Duration(env.RetryAfterMS)*time.Millisecond, 50*time.Millisecond))
				}
				if rng.Float64() < 0.1 {
					envs = append(envs, send(key)) // the answer was lost on the agent's side
				}
				verdict := keyVerdict{key: key}
				for _, env := range envs {
					if env == nil {
						continue
					}
					switch {
					case env.Status == contracts.StatusOK && env.SideEffect == contracts.SideEffectDone:
						if verdict.done && !bytes.Equal(verdict.data, env.Data) {
							violate("%s: answered %s, then %s", key, verdict.data, env.Data)
						}
						verdict.data, verdict.done = env.Data, true
					case env.SideEffect == contracts.SideEffectUnknown:
						// A twin may wait for the other past its deadline:
						// the outcome is unknown to it, and retryable.
						if !(twins && env.Status == contracts.StatusTimeout && env.Retryable && !env.Replayed) {
							verdict.unknown = env
						}
					}
				}
				mu.Lock()
				verdicts = append(verdicts, verdict)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	front.Client().CloseIdleConnections()
	httpClient.CloseIdleConnections()
	front.Close()

	effects, unknowns := 0, 0
	b.mu.Lock()
	for _, v := range verdicts {
		n := b.effects[v.key]
		effects += n
		if v.unknown != nil {
			unknowns++
		}
		switch {
		case n > 1:
			violate("%s: %d side effects", v.key, n)
		case v.unknown != nil && n == 0:
			violate("%s: false unknown, the backend never saw the call (%s, replayed %v): %s", v.key, v.unknown.Status, v.unknown.Replayed, v.unknown.Message)
		case v.done && n == 0:
			violate("%s: done, but no side effect happened", v.key)
		case !v.done && v.unknown == nil:
			violate("%s: neither done nor unknown after 20 attempts", v.key)
		}
	}
	b.mu.Unlock()
	// Every effect was charged once; nothing else was (calls that sent
	// nothing were refunded).
	direct := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer direct.Close()
	var units int64
	budgetKeys, err := direct.Keys(context.Background(), redisstate.DefaultBudgetPrefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range budgetKeys {
		if !strings.Contains(k, ":charge:") {
			n, _ := direct.Get(context.Background(), k).Int64()
			units += n
		}
	}
	// A charge whose refund (or withdrawal) found Redis too slow stays:
	// the caller pays for a call that did not happen, never the reverse.
	if want, extra := int64(effects)*10_000, unrefunded.n.Load()*10_000; units < want || units > want+extra {
		violate("the budget holds %d micro-units for %d effects and %d charges not refunded, want %d to %d", units, effects, unrefunded.n.Load(), want, want+extra)
	}
	core.Close()
	watch.stop()

	stalls, longest := watch.summary()
	line := fmt.Sprintf("soak store=redis-faults-once seed=%d duration=%s callers=%d keys=%d calls=%d effects=%d unknown=%d unrefunded=%d late=%d stalls=%d/%v %s",
		*soakSeed, *soakRedis, *soakCallers, len(verdicts), calls.Load(), effects, unknowns, unrefunded.n.Load(), late.Load(), stalls, longest.Round(time.Millisecond), faults.summary(p))
	fmt.Println(line)
	t.Log(line)
	if p.Applied(faults.cutReply) == 0 || p.Applied(faults.cutRequest) == 0 {
		t.Error("the run injected no Redis faults")
	}
	for _, v := range violations {
		t.Error(v)
	}
}
