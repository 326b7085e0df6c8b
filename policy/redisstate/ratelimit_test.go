package redisstate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/internal/testkit/redistest"
	"github.com/toolgate/toolgate/internal/testkit/statetest"
	"github.com/toolgate/toolgate/policy"
)

// newTestRedisRates returns limiters on their own client, with keys no
// other test shares. Limiters built with the same prefix share buckets.
func newTestRedisRates(t testing.TB, addr, prefix, onError string) (*RateLimiters, *redis.Client) {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: addr, DialerRetries: 1, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	r, err := NewRateLimiters(client, RateOptions{Prefix: prefix, OnError: onError})
	if err != nil {
		t.Fatal(err)
	}
	return r, client
}

// take calls Take and fails on a store error.
func take(t *testing.T, r policy.RateLimiter, c *policy.Caller, tool string) (bool, time.Duration) {
	t.Helper()
	ok, wait, err := r.Take(t.Context(), c, tool)
	if err != nil {
		t.Fatalf("Take(%s, %s): %v", c.Name, tool, err)
	}
	return ok, wait
}

// takeN takes n tokens, each of which must be granted.
func takeN(t *testing.T, r policy.RateLimiter, c *policy.Caller, tool string, n int) {
	t.Helper()
	for i := range n {
		if ok, wait := take(t, r, c, tool); !ok {
			t.Fatalf("call %d of %d refused (retry after %v)", i+1, n, wait)
		}
	}
}

// slow is a rate that refills nothing within a test: one token per 1000s.
const slow = 0.001

func TestRedisRateLimiters(t *testing.T) {
	srv := redistest.Start(t)

	t.Run("the burst passes, then the caller is told when the next token comes", func(t *testing.T) {
		r, _ := newTestRedisRates(t, srv.Addr(), budgetPrefix(t), "")
		c := statetest.RateCaller("ops-agent", &policy.RateSettings{RPS: 0.5, Burst: 3}, nil)
		takeN(t, r, c, "search", 3)
		ok, wait := take(t, r, c, "search")
		// One token every 2s; the test took a little of that already.
		if ok || wait <= 500*time.Millisecond || wait > 2*time.Second || wait%time.Millisecond != 0 {
			t.Fatalf("Take = %v, %v; want refused with a wait in (500ms, 2s] in whole milliseconds", ok, wait)
		}
	})

	t.Run("a tool override has its own bucket and the other tools share the caller's", func(t *testing.T) {
		r, _ := newTestRedisRates(t, srv.Addr(), budgetPrefix(t), "")
		c := statetest.RateCaller("ops-agent", &policy.RateSettings{RPS: slow, Burst: 1}, map[string]policy.RateSettings{"send": {RPS: slow, Burst: 2}})
		takeN(t, r, c, "search", 1)
		for _, tool := range []string{"search", "other"} {
			if ok, _ := take(t, r, c, tool); ok {
				t.Fatalf("%s passed the caller's spent bucket", tool)
			}
		}
		takeN(t, r, c, "send", 2)
		if ok, _ := take(t, r, c, "send"); ok {
			t.Fatal("the override passed its burst")
		}
	})

	t.Run("callers the policy does not list and callers without a rate are not limited and touch nothing", func(t *testing.T) {
		r, client := newTestRedisRates(t, srv.Addr(), budgetPrefix(t), "")
		takeN(t, r, nil, "search", 50)
		takeN(t, r, statetest.RateCaller("free", nil, nil), "search", 50)
		if keys := client.Keys(t.Context(), budgetPrefix(t)+"*").Val(); len(keys) != 0 {
			t.Fatalf("keys %v were written", keys)
		}
	})

	t.Run("settings the compiler rejects refuse every call without a wait", func(t *testing.T) {
		r, _ := newTestRedisRates(t, srv.Addr(), budgetPrefix(t), "")
		for _, s := range []policy.RateSettings{{RPS: 0, Burst: 1}, {RPS: 1, Burst: 0}} {
			if ok, wait := take(t, r, statetest.RateCaller("c", &s, nil), "t"); ok || wait != 0 {
				t.Fatalf("Take with %+v = %v, %v; want refused, no wait", s, ok, wait)
			}
		}
	})

	t.Run("a refused call takes no token", func(t *testing.T) {
		r, client := newTestRedisRates(t, srv.Addr(), budgetPrefix(t), "")
		c := statetest.RateCaller("ops-agent", &policy.RateSettings{RPS: slow, Burst: 2}, nil)
		takeN(t, r, c, "t", 2)
		key := r.key(policy.RateKey{Caller: "ops-agent", Tool: policy.RateAllTools})
		before := client.Get(t.Context(), key).Val()
		for range 5 {
			if ok, _ := take(t, r, c, "t"); ok {
				t.Fatal("a call passed the spent bucket")
			}
		}
		if after := client.Get(t.Context(), key).Val(); after != before || before == "" {
			t.Fatalf("the bucket moved from %q to %q on refusals", before, after)
		}
	})

	t.Run("an idle bucket's key expires when the bucket would be full again", func(t *testing.T) {
		r, client := newTestRedisRates(t, srv.Addr(), budgetPrefix(t), "")
		c := statetest.RateCaller("ops-agent", &policy.RateSettings{RPS: 10, Burst: 5}, nil)
		takeN(t, r, c, "t", 3)
		pttl := client.PTTL(t.Context(), r.key(policy.RateKey{Caller: "ops-agent", Tool: policy.RateAllTools})).Val()
		if pttl <= 0 || pttl > 300*time.Millisecond {
			t.Fatalf("PTTL = %v, want at most 300ms (3 tokens at 10 rps)", pttl)
		}
	})

	t.Run("a reload's new settings apply on the next call and keep what was spent", func(t *testing.T) {
		r, _ := newTestRedisRates(t, srv.Addr(), budgetPrefix(t), "")
		c := statetest.RateCaller("ops-agent", &policy.RateSettings{RPS: slow, Burst: 2}, nil)
		takeN(t, r, c, "t", 2)
		c = statetest.RateCaller("ops-agent", &policy.RateSettings{RPS: slow, Burst: 5}, nil)
		takeN(t, r, c, "t", 3)
		if ok, _ := take(t, r, c, "t"); ok {
			t.Fatal("the larger burst was granted in full on top of what was spent")
		}
	})

	t.Run("a caller's rate keys share the hash slot of its budget keys", func(t *testing.T) {
		r, _ := newTestRedisRates(t, srv.Addr(), "", "")
		b := NewBudgets(nil, BudgetOptions{})
		sum := sha256.Sum256([]byte("ops-agent"))
		tag := "{" + hex.EncodeToString(sum[:]) + "}"
		for _, key := range []string{
			r.key(policy.RateKey{Caller: "ops-agent", Tool: policy.RateAllTools}),
			r.key(policy.RateKey{Caller: "ops-agent", Tool: strings.Repeat("t", 1000)}),
			b.windowKey("ops-agent", time.Unix(3600, 0)),
		} {
			if !strings.Contains(key, tag) || redistest.Slot(key) != redistest.Slot(tag) {
				t.Fatalf("key %q is not in the caller's slot (tag %s)", key, tag)
			}
		}
		if k := r.key(policy.RateKey{Caller: "ops-agent", Tool: strings.Repeat("t", 1000)}); len(k) != len(DefaultRatePrefix)+2+64+1+64 {
			t.Fatalf("key %q has an unbounded length", k)
		}
	})
}

func TestRedisRateLimitersSharedByTwoInstances(t *testing.T) {
	srv := redistest.Start(t)

	t.Run("concurrent calls on two instances never pass the burst between them", func(t *testing.T) {
		var rs []*RateLimiters
		for range 2 {
			r, _ := newTestRedisRates(t, srv.Addr(), budgetPrefix(t), "")
			rs = append(rs, r)
		}
		c := statetest.RateCaller("ops-agent", &policy.RateSettings{RPS: slow, Burst: 10}, nil)
		var allowed atomic.Int64
		var wg sync.WaitGroup
		for i := range 100 {
			wg.Go(func() {
				ok, _, err := rs[i%2].Take(context.Background(), c, "t")
				if err != nil {
					t.Error(err)
				}
				if ok {
					allowed.Add(1)
				}
			})
		}
		wg.Wait()
		if n := allowed.Load(); n != 10 {
			t.Fatalf("%d calls allowed across two instances, want the burst of 10", n)
		}
	})

	t.Run("memory limiters on two instances each allow the burst", func(t *testing.T) {
		// What the shared limiters fix: the same load on per-replica
		// buckets passes twice the burst.
		rs := []*policy.RateLimiters{policy.NewRateLimiters(nil), policy.NewRateLimiters(nil)}
		c := statetest.RateCaller("ops-agent", &policy.RateSettings{RPS: slow, Burst: 10}, nil)
		allowed := 0
		for i := range 100 {
			if ok, _ := rs[i%2].Allow(c, "t"); ok {
				allowed++
			}
		}
		if allowed != 20 {
			t.Fatalf("%d calls allowed, want 20", allowed)
		}
	})
}

func TestRedisRateLimitersOnError(t *testing.T) {
	srv := redistest.Start(t)
	c := statetest.RateCaller("ops-agent", &policy.RateSettings{RPS: slow, Burst: 2}, nil)
	open, _ := newTestRedisRates(t, srv.Addr(), budgetPrefix(t), policy.OnErrorOpen)
	byDefault, _ := newTestRedisRates(t, srv.Addr(), budgetPrefix(t), "")
	closed, _ := newTestRedisRates(t, srv.Addr(), budgetPrefix(t), policy.OnErrorClosed)
	srv.Stop()

	for name, r := range map[string]*RateLimiters{"open": open, "unset": byDefault} {
		t.Run("with on_error "+name+" a call is checked against this replica's own bucket", func(t *testing.T) {
			for i := range 2 {
				if ok, _, err := r.Take(t.Context(), c, "t"); !ok || err == nil {
					t.Fatalf("call %d = %v, %v; want allowed by the local bucket, with the store's error", i+1, ok, err)
				}
			}
			if ok, wait, err := r.Take(t.Context(), c, "t"); ok || wait <= 0 || err == nil {
				t.Fatalf("third call = %v, %v, %v; want refused by the local bucket with a wait", ok, wait, err)
			}
		})
	}

	t.Run("with on_error closed a call is refused without a wait", func(t *testing.T) {
		if ok, wait, err := closed.Take(t.Context(), c, "t"); ok || wait != 0 || err == nil {
			t.Fatalf("Take = %v, %v, %v; want refused with the store's error", ok, wait, err)
		}
	})

	t.Run("a call nothing limits does not need the store", func(t *testing.T) {
		if ok, _, err := closed.Take(t.Context(), statetest.RateCaller("free", nil, nil), "t"); !ok || err != nil {
			t.Fatalf("Take = %v, %v; want allowed", ok, err)
		}
	})

	t.Run("an unknown on_error is refused", func(t *testing.T) {
		if _, err := NewRateLimiters(nil, RateOptions{OnError: "maybe"}); err == nil {
			t.Fatal("on_error maybe was accepted")
		}
	})
}
