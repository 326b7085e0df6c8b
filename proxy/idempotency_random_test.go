package proxy

import (
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/toolgate/toolgate/contracts"
	"github.com/toolgate/toolgate/internal/testkit/redistest"
)

// chaosBackend performs side effects with faults chosen by a seeded
// schedule per (nonce, attempt): clean success, a 500 before or after the
// effect, a reset after the effect, a hang after the effect.
type chaosBackend struct {
	seed    uint64
	mu      sync.Mutex
	effects map[string]int
	tries   map[string]int
}

func (b *chaosBackend) fault(nonce string, try int) int {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", nonce, try)
	return int(rand.New(rand.NewPCG(b.seed, h.Sum64())).Uint64N(10))
}

func (b *chaosBackend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	nonce := string(body)
	b.mu.Lock()
	b.tries[nonce]++
	f := b.fault(nonce, b.tries[nonce])
	effect := f != 4 // fault 4: a 500 before anything happened
	if effect {
		b.effects[nonce]++
	}
	b.mu.Unlock()
	switch f {
	case 3, 4: // 500 after / before the effect
		w.WriteHeader(http.StatusInternalServerError)
	case 5: // reset after the effect
		conn, _, _ := w.(http.Hijacker).Hijack()
		if tc, ok := conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		conn.Close()
	case 6: // hang past the deadline after the effect
		<-r.Context().Done()
	default:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%q}`, nonce)
	}
}

const chaosPolicy = `
version: 1
upstreams:
  svc: {url: "{{url}}", timeout: 2s}
tools:
  act:
    description: Do something once.
    upstream: svc
    side_effect: true
    timeout: 300ms
    args: {type: object, required: [nonce], properties: {nonce: {type: string}}}
    request: {method: POST, path: /act}
`

// TestRandomFaultsNeverDoubleAnEffect is a seeded run of many keys, callers
// that retry with the same key, random backend faults (500s, resets, hangs)
// and restarts of the Redis store, checked per key against what the backend
// did: an envelope saying done means exactly one effect, none means zero,
// unknown allows either, and no key ever has two.
func TestRandomFaultsNeverDoubleAnEffect(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	redisSrv := redistest.StartPersistent(t)
	cb := &chaosBackend{seed: seed, effects: map[string]int{}, tries: map[string]int{}}
	backend := httptest.NewServer(cb)
	t.Cleanup(backend.Close)
	doc := strings.ReplaceAll(chaosPolicy, "{{url}}", backend.URL)
	// The nonce is the request body, so the backend can count effects per key.
	doc = strings.Replace(doc, "request: {method: POST, path: /act}", "request: {method: POST, path: /act, body: {n: nonce}}", 1)
	h := newIdemHarnessDoc(t, doc, newRedisStore(t, redisSrv))

	const keys, callers, tries = 120, 12, 4
	type seen struct {
		effects []contracts.SideEffect
	}
	var mu sync.Mutex
	history := map[string]*seen{}
	work := make(chan int)
	stop := make(chan struct{})
	restarted := make(chan struct{})
	go func() {
		// Restart the store twice while calls run; AOF keeps the keys.
		defer close(restarted)
		for range 2 {
			select {
			case <-stop:
				return
			case <-time.After(700 * time.Millisecond):
			}
			redisSrv.Restart()
		}
	}()
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for k := range work {
				key := fmt.Sprintf("key-%03d", k)
				args := fmt.Sprintf(`{"nonce":%q}`, key)
				for range tries {
					_, env := h.send(t, "act", key, args)
					mu.Lock()
					s := history[key]
					if s == nil {
						s = &seen{}
						history[key] = s
					}
					s.effects = append(s.effects, env.SideEffect)
					mu.Unlock()
					if !env.Retryable {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	for k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	close(stop)
	<-restarted

	cb.mu.Lock()
	defer cb.mu.Unlock()
	var violations []string
	counts := map[contracts.SideEffect]int{}
	for key, s := range history {
		n := cb.effects[`{"n":"`+key+`"}`]
		done, unknown := false, false
		for _, e := range s.effects {
			counts[e]++
			done = done || e == contracts.SideEffectDone
			unknown = unknown || e == contracts.SideEffectUnknown
		}
		switch {
		case n > 1:
			violations = append(violations, fmt.Sprintf("%s: %d effects", key, n))
		case done && n != 1:
			violations = append(violations, fmt.Sprintf("%s: done but %d effects", key, n))
		case !done && !unknown && n != 0:
			violations = append(violations, fmt.Sprintf("%s: only none but %d effects", key, n))
		}
	}
	t.Logf("keys %d, envelopes done=%d none=%d unknown=%d, violations %d", len(history),
		counts[contracts.SideEffectDone], counts[contracts.SideEffectNone], counts[contracts.SideEffectUnknown], len(violations))
	if len(violations) > 0 {
		t.Errorf("seed %d: %s", seed, strings.Join(violations, "; "))
	}
	if counts[contracts.SideEffectDone] == 0 || counts[contracts.SideEffectUnknown] == 0 {
		t.Errorf("the run did not exercise both outcomes: %v", counts)
	}
}
