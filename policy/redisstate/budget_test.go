package redisstate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/internal/testkit/redistest"
	"github.com/toolgate/toolgate/internal/testkit/statetest"
	"github.com/toolgate/toolgate/policy"
)

// newTestRedisBudgets returns a store on its own client, with keys no other
// test shares. Stores built with the same prefix share their budgets.
func newTestRedisBudgets(t testing.TB, srv *redistest.Server, prefix string, now func() time.Time) (*Budgets, *redis.Client) {
	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	return NewBudgets(client, BudgetOptions{Prefix: prefix, Now: now}), client
}

func budgetPrefix(t testing.TB) string { return "test:" + t.Name() + ":" }

func TestRedisBudgets(t *testing.T) {
	srv := redistest.Start(t)
	statetest.RunBudgetStoreTests(t, func(t *testing.T) statetest.BudgetTarget {
		clock := statetest.NewManualClock(statetest.BudgetT0)
		s, _ := newTestRedisBudgets(t, srv, budgetPrefix(t), clock.Now)
		return statetest.BudgetTarget{Store: s, Clock: clock}
	})
}

func TestRedisBudgetsSharedByTwoInstances(t *testing.T) {
	srv := redistest.Start(t)
	b := policy.BudgetSettings{Cost: 3.7, Per: time.Hour}

	t.Run("one instance sees what the other spent and refunded", func(t *testing.T) {
		a, _ := newTestRedisBudgets(t, srv, budgetPrefix(t), nil)
		c, _ := newTestRedisBudgets(t, srv, budgetPrefix(t), nil)
		if ch := statetest.MustSpend(t, a, "ops-agent", 3.0, b); !ch.OK {
			t.Fatal("the first spend was refused")
		}
		last := statetest.MustSpend(t, c, "ops-agent", 0.7, b)
		if !last.OK {
			t.Fatal("the second instance refused a spend within the shared budget")
		}
		if ch := statetest.MustSpend(t, a, "ops-agent", 0.1, b); ch.OK {
			t.Fatal("the first instance spent past the shared budget")
		}
		statetest.MustRefund(t, a, last) // a receipt is good on any instance
		if ch := statetest.MustSpend(t, c, "ops-agent", 0.7, b); !ch.OK {
			t.Fatal("the refund did not reach the other instance")
		}
	})

	t.Run("concurrent spends on two instances never overshoot", func(t *testing.T) {
		stores := []policy.BudgetStore{}
		for range 2 {
			s, _ := newTestRedisBudgets(t, srv, budgetPrefix(t), nil)
			stores = append(stores, s)
		}
		var spent atomic.Int64
		var wg sync.WaitGroup
		for i := range 100 {
			wg.Go(func() {
				ch, err := stores[i%2].Spend(context.Background(), "ops-agent", 0.1, b)
				if err != nil {
					t.Error(err)
				}
				if ch.OK {
					spent.Add(1)
				}
			})
		}
		wg.Wait()
		if n := spent.Load(); n != 37 {
			t.Fatalf("%d of 100 spends succeeded, want 37", n)
		}
	})
}

func TestRedisBudgetsWindowResets(t *testing.T) {
	srv := redistest.Start(t)
	s, client := newTestRedisBudgets(t, srv, budgetPrefix(t), nil)
	b := policy.BudgetSettings{Cost: 1, Per: time.Second}
	// Start early in a window, so spending and the refusal share it.
	ch, _, _, _, _ := policy.PrepareSpend("ops-agent", 1, b, time.Now())
	resetIn := ch.ResetIn
	if resetIn < 800*time.Millisecond {
		time.Sleep(resetIn)
	}
	first := statetest.MustSpend(t, s, "ops-agent", 1, b)
	if !first.OK {
		t.Fatal("the first spend was refused")
	}
	refused := statetest.MustSpend(t, s, "ops-agent", 0.5, b)
	if refused.OK || refused.ResetIn <= 0 || refused.ResetIn > time.Second {
		t.Fatalf("second spend: %+v; want refused, resetting within a second", refused)
	}
	ttl, err := client.PTTL(t.Context(), s.windowKey("ops-agent", first.Window)).Result()
	if err != nil || ttl <= budgetKeyGrace || ttl > time.Second+budgetKeyGrace {
		t.Fatalf("PTTL = %v, %v; want the window's rest plus %v", ttl, err, budgetKeyGrace)
	}
	time.Sleep(refused.ResetIn + 10*time.Millisecond)
	next := statetest.MustSpend(t, s, "ops-agent", 1, b)
	if !next.OK || !next.Window.After(first.Window) {
		t.Fatalf("spend after the reset: %+v; want ok in a window after %v", next, first.Window)
	}
}

func TestRedisBudgetsKeys(t *testing.T) {
	srv := redistest.Start(t)
	ctx := t.Context()
	clock := statetest.NewManualClock(statetest.BudgetT0)
	s, client := newTestRedisBudgets(t, srv, "", clock.Now)
	b := policy.BudgetSettings{Cost: 1, Per: time.Hour}

	sum := sha256.Sum256([]byte("ops-agent"))
	tag := "toolgate:budget:{" + hex.EncodeToString(sum[:]) + "}:"
	key := tag + "1699999200000"

	t.Run("a window is one integer key of micro-units, with a key per charge", func(t *testing.T) {
		ch := statetest.MustSpend(t, s, "ops-agent", 0.25, b)
		small := statetest.MustSpend(t, s, "ops-agent", 0.000002, b)
		if got := s.windowKey("ops-agent", ch.Window); got != key {
			t.Fatalf("key %q, want %q", got, key)
		}
		if v, err := client.Get(ctx, key).Result(); err != nil || v != "250002" {
			t.Fatalf("GET %s = %q, %v; want 250002", key, v, err)
		}
		keys, err := client.Keys(ctx, "toolgate:budget:*").Result()
		slices.Sort(keys)
		want := []string{key, tag + "charge:" + ch.Token, tag + "charge:" + small.Token}
		slices.Sort(want)
		if err != nil || !slices.Equal(keys, want) {
			t.Fatalf("keys %v, %v; want %v", keys, err, want)
		}
		charge := tag + "charge:" + ch.Token
		if v := client.Get(ctx, charge).Val(); v != "c" {
			t.Fatalf("GET %s = %q, want c", charge, v)
		}
		if pttl, window := client.PTTL(ctx, charge).Val(), client.PTTL(ctx, key).Val(); pttl <= budgetKeyGrace || pttl > window+time.Second {
			t.Fatalf("charge PTTL = %v, want at most the window key's (%v)", pttl, window)
		}
		statetest.MustRefund(t, s, ch)
		if v := client.Get(ctx, charge).Val(); v != "r" {
			t.Fatalf("GET %s after the refund = %q, want r", charge, v)
		}
		if v := client.Get(ctx, key).Val(); v != "2" {
			t.Fatalf("GET %s after the refund = %q, want 2", key, v)
		}
	})

	t.Run("a charge's key lives until the spend's deadline and a minute", func(t *testing.T) {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		ch, err := s.Spend(dctx, "deadline-agent", 0.1, b)
		if err != nil || !ch.OK {
			t.Fatalf("Spend = %+v, %v", ch, err)
		}
		pttl := client.PTTL(ctx, s.chargeKey("deadline-agent", ch.Token)).Val()
		if pttl <= budgetKeyGrace || pttl > budgetKeyGrace+10*time.Second {
			t.Fatalf("PTTL = %v, want the deadline plus %v", pttl, budgetKeyGrace)
		}
	})

	t.Run("zero costs do not touch Redis", func(t *testing.T) {
		before, _ := client.DBSize(ctx).Result()
		statetest.MustSpend(t, s, "fresh-agent", 0, b)
		if after, _ := client.DBSize(ctx).Result(); after != before {
			t.Fatalf("DBSIZE went from %d to %d", before, after)
		}
	})

	t.Run("a refund for a window whose key expired creates nothing", func(t *testing.T) {
		ch := statetest.MustSpend(t, s, "gone-agent", 0.5, b)
		k := s.windowKey("gone-agent", ch.Window)
		if err := client.Del(ctx, k).Err(); err != nil {
			t.Fatal(err)
		}
		statetest.MustRefund(t, s, ch)
		if n, err := client.Exists(ctx, k).Result(); err != nil || n != 0 {
			t.Fatalf("EXISTS %s = %d, %v; want 0", k, n, err)
		}
	})

	t.Run("a key that is not a number is an error, not a free budget", func(t *testing.T) {
		sum := sha256.Sum256([]byte("odd-agent"))
		odd := "toolgate:budget:{" + hex.EncodeToString(sum[:]) + "}:1699999200000"
		if err := client.Set(ctx, odd, "garbage", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if ch, err := s.Spend(ctx, "odd-agent", 0.1, b); err == nil {
			t.Fatalf("Spend = %+v, nil; want an error", ch)
		}
	})
}

func TestRedisBudgetsUnreachable(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	s := NewBudgets(client, BudgetOptions{Prefix: budgetPrefix(t)})
	b := policy.BudgetSettings{Cost: 1, Per: time.Hour}
	ch := statetest.MustSpend(t, s, "ops-agent", 0.5, b)
	srv.Stop()
	if got, err := s.Spend(t.Context(), "ops-agent", 0.1, b); err == nil || got.OK {
		t.Fatalf("Spend with Redis down = %+v, %v; want an error and not ok", got, err)
	}
	if err := s.Refund(t.Context(), ch); err == nil {
		t.Fatal("Refund with Redis down succeeded")
	}
}
