package redisstate

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/internal/testkit/redistest"
	"github.com/toolgate/toolgate/internal/testkit/statetest"
	"github.com/toolgate/toolgate/policy"
)

// clusterClient returns a client of toolgate's options on c, closed when
// the test ends.
func clusterClient(t testing.TB, c *redistest.Cluster) redis.UniversalClient {
	t.Helper()
	client, err := NewClient(policy.State{Redis: policy.RedisSettings{Cluster: joinAddrs(c.Addrs())}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := client.(*redis.ClusterClient); !ok {
		t.Fatalf("NewClient made a %T, want a cluster client", client)
	}
	t.Cleanup(func() { _ = client.Close() })
	return client
}

func joinAddrs(addrs []string) string {
	s := ""
	for i, a := range addrs {
		if i > 0 {
			s += ","
		}
		s += a
	}
	return s
}

// TestRedisCluster runs the stores on one 3-primary Redis Cluster shared by
// its subtests: the conformance suites, and claims, spends and rate checks
// while the slot of their hot key moves between nodes.
func TestRedisCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)

	t.Run("the idempotency store passes the conformance suite", func(t *testing.T) {
		statetest.RunIdempotencyStoreTests(t, func(t *testing.T) statetest.StoreTarget {
			s := NewStore(clusterClient(t, cluster), StoreOptions{Prefix: "test:" + t.Name() + ":"})
			return statetest.StoreTarget{Store: s, Advance: time.Sleep}
		})
	})

	t.Run("budgets pass the conformance suite", func(t *testing.T) {
		statetest.RunBudgetStoreTests(t, func(t *testing.T) statetest.BudgetTarget {
			clock := statetest.NewManualClock(statetest.BudgetT0)
			return statetest.BudgetTarget{Store: NewBudgets(clusterClient(t, cluster), BudgetOptions{Prefix: budgetPrefix(t), Now: clock.Now}), Clock: clock}
		})
	})

	t.Run("the readiness probe writes", func(t *testing.T) {
		s := NewStore(clusterClient(t, cluster), StoreOptions{})
		if err := s.Ping(t.Context()); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a claim on a node without replicas is not confirmed", func(t *testing.T) {
		s := NewStore(clusterClient(t, cluster), StoreOptions{Prefix: "test:" + t.Name() + ":", ConfirmReplicas: 1, ConfirmTimeout: 20 * time.Millisecond})
		for i := range 6 { // keys on every node, most likely
			k := statetest.Key("k" + strconv.Itoa(i))
			if _, err := s.Claim(t.Context(), k, policy.Fingerprint{1}, time.Minute, time.Minute); !errors.Is(err, ErrUnconfirmed) {
				t.Fatalf("Claim = %v; want ErrUnconfirmed", err)
			}
			statetest.ExpectAbsent(t, s, k)
		}
	})

	t.Run("claims on hot keys run once each while their slot moves", func(t *testing.T) {
		prefix := "test:" + t.Name() + ":"
		stores := []*Store{
			NewStore(clusterClient(t, cluster), StoreOptions{Prefix: prefix}),
			NewStore(clusterClient(t, cluster), StoreOptions{Prefix: prefix}),
		}
		keys := sameSlotKeys(stores[0], 6)
		owned := make([]atomic.Int32, len(keys))
		var claims, errs atomic.Int32
		m := migrate(t, cluster, redistest.Slot(stores[0].key(keys[0])))
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				s := stores[w%2]
				for m.running(3) {
					for i, k := range keys {
						claims.Add(1)
						c, err := s.Claim(context.Background(), k, policy.Fingerprint{1}, time.Minute, time.Minute)
						if err != nil {
							errs.Add(1)
							continue
						}
						if c.Outcome == policy.ClaimOwned {
							owned[i].Add(1)
							if err := s.Complete(context.Background(), k, c.Token, []byte(`{}`), time.Minute); err != nil {
								t.Errorf("Complete %v: %v", k, err)
							}
						}
					}
				}
			})
		}
		wg.Wait()
		moves := m.end()
		for i := range owned {
			if n := owned[i].Load(); n != 1 {
				t.Errorf("key %v owned %d times, want once", keys[i], n)
			}
		}
		t.Logf("%d slot moves; %d of %d claims failed (withdrawn, retryable)", moves, errs.Load(), claims.Load())
	})

	t.Run("spends never pass the budget while its slot moves", func(t *testing.T) {
		b := NewBudgets(clusterClient(t, cluster), BudgetOptions{Prefix: budgetPrefix(t)})
		m := migrate(t, cluster, redistest.Slot(b.windowKey("ops-agent", time.Unix(0, 0))))
		settings := policy.BudgetSettings{Cost: 5, Per: time.Hour}
		var spent, errs atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for m.running(2) {
					ch, err := b.Spend(context.Background(), "ops-agent", 0.01, settings)
					switch {
					case err != nil:
						errs.Add(1)
					case ch.OK:
						spent.Add(1)
					}
				}
			})
		}
		wg.Wait()
		moves := m.end()
		if n := spent.Load(); n > 500 {
			t.Fatalf("%d spends of 0.01 passed a budget of 5", n)
		}
		t.Logf("%d slot moves; %d spends, %d failed (charged nothing, retryable)", moves, spent.Load(), errs.Load())
	})

	t.Run("rate checks never pass the burst while their slot moves", func(t *testing.T) {
		var rs []*RateLimiters
		for range 2 {
			r, err := NewRateLimiters(clusterClient(t, cluster), RateOptions{Prefix: budgetPrefix(t), OnError: policy.OnErrorClosed})
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		}
		m := migrate(t, cluster, redistest.Slot(rs[0].key(policy.RateKey{Caller: "ops-agent", Tool: policy.RateAllTools})))
		c := statetest.RateCaller("ops-agent", &policy.RateSettings{RPS: slow, Burst: 20}, nil)
		var allowed, errs atomic.Int64
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				for m.running(2) {
					ok, _, err := rs[i%2].Take(context.Background(), c, "t")
					switch {
					case err != nil:
						errs.Add(1)
					case ok:
						allowed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		moves := m.end()
		if n := allowed.Load(); n != 20 {
			t.Fatalf("%d calls passed a burst of 20, want 20", n)
		}
		t.Logf("%d slot moves; %d rate checks failed (refused: on_error closed)", moves, errs.Load())
	})
}

// migration moves a slot from node to node, one key at a time, until
// stopped. A move under way when it is stopped is finished, so the slot is
// never left half moved.
type migration struct {
	moves atomic.Int32
	stop  atomic.Bool
	done  chan struct{}
}

// migrate starts moving slot.
func migrate(t *testing.T, c *redistest.Cluster, slot int) *migration {
	t.Helper()
	m := &migration{done: make(chan struct{})}
	go func() {
		defer close(m.done)
		ctx := context.Background()
		for !m.stop.Load() {
			from, err := c.Owner(ctx, slot)
			if err != nil {
				t.Errorf("owner of slot %d: %v", slot, err)
				return
			}
			if err := c.MigrateSlot(ctx, slot, (from+1)%len(c.Nodes), 2*time.Millisecond); err != nil {
				t.Errorf("migrate slot %d: %v", slot, err)
				return
			}
			m.moves.Add(1)
		}
	}()
	return m
}

// running reports whether fewer than n moves are done: load runs while it
// holds, so it meets the slot half moved.
func (m *migration) running(n int32) bool {
	select {
	case <-m.done:
		return false
	default:
		return m.moves.Load() < n
	}
}

// end stops the moves and reports how many completed.
func (m *migration) end() int32 {
	m.stop.Store(true)
	<-m.done
	return m.moves.Load()
}

// sameSlotKeys returns n idempotency keys whose records share the slot of
// the first, so a slot move carries several live records.
func sameSlotKeys(s *Store, n int) []policy.IdempotencyKey {
	keys := []policy.IdempotencyKey{statetest.Key("hot")}
	slot := redistest.Slot(s.key(keys[0]))
	for i := 0; len(keys) < n; i++ {
		if k := statetest.Key("k" + strconv.Itoa(i)); redistest.Slot(s.key(k)) == slot {
			keys = append(keys, k)
		}
	}
	return keys
}
