package redisstate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/internal/testkit/redistest"
	"github.com/toolgate/toolgate/internal/testkit/statetest"
	"github.com/toolgate/toolgate/policy"
)

// newConfirmingStore returns a store on addr that confirms claims on
// replicas replicas, waiting at most timeout.
func newConfirmingStore(t testing.TB, client redis.UniversalClient, replicas int, timeout time.Duration) *Store {
	t.Helper()
	s := NewStore(client, StoreOptions{Prefix: "test:" + t.Name() + ":", ConfirmReplicas: replicas, ConfirmTimeout: timeout})
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestRedisStoreConfirmsClaimsOnReplicas(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.StartReplicaOf(t, primary)
	onReplica := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	t.Cleanup(func() { onReplica.Close() })
	fp := policy.Fingerprint{1}

	t.Run("the store passes the conformance suite with every claim confirmed", func(t *testing.T) {
		statetest.RunIdempotencyStoreTests(t, func(t *testing.T) statetest.StoreTarget {
			s := newConfirmingStore(t, redis.NewClient(&redis.Options{Addr: primary.Addr()}), 1, time.Second)
			return statetest.StoreTarget{Store: s, Advance: time.Sleep}
		})
	})

	t.Run("a confirmed claim is on the replica when policy.Claim returns", func(t *testing.T) {
		s := newConfirmingStore(t, redis.NewClient(&redis.Options{Addr: primary.Addr()}), 1, time.Second)
		for i := range 20 {
			k := statetest.Key("k" + string(rune('a'+i)))
			c, err := s.Claim(t.Context(), k, fp, time.Minute, time.Minute)
			if err != nil || c.Outcome != policy.ClaimOwned {
				t.Fatalf("Claim = %v, %v; want owned", c.Outcome, err)
			}
			// Read the replica at once, without waiting for it.
			raw, err := onReplica.Get(t.Context(), s.key(k)).Result()
			if r, _, ok := decodeRedisRecord(raw); err != nil || !ok || r.State != policy.RecordInFlight || r.Token != c.Token {
				t.Fatalf("the replica holds %q, %v; want the claim", raw, err)
			}
		}
	})

	t.Run("a reclaim is confirmed too", func(t *testing.T) {
		s := newConfirmingStore(t, redis.NewClient(&redis.Options{Addr: primary.Addr()}), 1, time.Second)
		k := statetest.Key("k")
		old := statetest.MustClaim(t, s, k, fp, time.Minute, time.Minute)
		if err := s.MarkUnknown(t.Context(), k, old, nil, time.Minute); err != nil {
			t.Fatal(err)
		}
		c, err := s.Reclaim(t.Context(), k, fp, time.Minute, time.Minute)
		if err != nil || c.Outcome != policy.ClaimOwned {
			t.Fatalf("Reclaim = %v, %v; want owned", c.Outcome, err)
		}
		raw := onReplica.Get(t.Context(), s.key(k)).Val()
		if r, _, _ := decodeRedisRecord(raw); r.Token != c.Token {
			t.Fatalf("the replica holds %q; want the reclaim", raw)
		}
	})

	t.Run("a claim fewer replicas acknowledge is withdrawn and reported unconfirmed", func(t *testing.T) {
		s := newConfirmingStore(t, redis.NewClient(&redis.Options{Addr: primary.Addr()}), 2, 50*time.Millisecond)
		k := statetest.Key("k")
		c, err := s.Claim(t.Context(), k, fp, time.Minute, time.Minute)
		if !errors.Is(err, ErrUnconfirmed) {
			t.Fatalf("Claim = %v, %v; want ErrUnconfirmed", c.Outcome, err)
		}
		statetest.ExpectAbsent(t, s, k) // a tombstone: the next claim may run
		// A store that asks for what the topology has claims it.
		statetest.MustClaim(t, newConfirmingStore(t, redis.NewClient(&redis.Options{Addr: primary.Addr()}), 1, time.Second), k, fp, time.Minute, time.Minute)
	})

	t.Run("a claim that finds a record is not confirmed and not withdrawn", func(t *testing.T) {
		s := newConfirmingStore(t, redis.NewClient(&redis.Options{Addr: primary.Addr()}), 2, 50*time.Millisecond)
		k := statetest.Key("k")
		owner := newConfirmingStore(t, redis.NewClient(&redis.Options{Addr: primary.Addr()}), 0, 0)
		owner.prefix = s.prefix
		token := statetest.MustClaim(t, owner, k, fp, time.Minute, time.Minute)
		c, err := s.Claim(t.Context(), k, fp, time.Minute, time.Minute)
		if err != nil || c.Outcome != policy.ClaimInFlight {
			t.Fatalf("Claim = %v, %v; want in flight", c.Outcome, err)
		}
		if err := owner.Complete(t.Context(), k, token, []byte(`{}`), time.Minute); err != nil {
			t.Fatalf("the owner lost its claim: %v", err)
		}
	})

	t.Run("the wait ends with the call's deadline", func(t *testing.T) {
		s := newConfirmingStore(t, redis.NewClient(&redis.Options{Addr: primary.Addr(), ContextTimeoutEnabled: true}), 2, 10*time.Second)
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		began := time.Now()
		if _, err := s.Claim(ctx, statetest.Key("k"), fp, time.Minute, time.Minute); err == nil {
			t.Fatal("Claim succeeded without its replicas")
		}
		if took := time.Since(began); took > 3*time.Second {
			t.Fatalf("Claim took %v with a 100ms deadline and a 10s confirmation timeout", took)
		}
	})
}

func TestRedisStoreOnAPrimaryWithoutReplicasConfirmsNothing(t *testing.T) {
	// A primary cut off from its replicas (a stale primary on the wrong
	// side of a partition, or one restarted before the Sentinels turned it
	// into a replica) hands out no claim in confirmed mode.
	srv := redistest.Start(t)
	for _, replicas := range []int{1, 3} {
		s := newConfirmingStore(t, redis.NewClient(&redis.Options{Addr: srv.Addr()}), replicas, 20*time.Millisecond)
		k := statetest.Key("k")
		if _, err := s.Claim(t.Context(), k, policy.Fingerprint{1}, time.Minute, time.Minute); !errors.Is(err, ErrUnconfirmed) {
			t.Fatalf("Claim with %d replicas asked = %v; want ErrUnconfirmed", replicas, err)
		}
		statetest.ExpectAbsent(t, s, k)
	}
}

func TestRedisStoreConfirmationAcrossAPromotion(t *testing.T) {
	// The replica stops following the primary (a broken link, a lagging
	// replica) and is then promoted: a claim the primary granted since is
	// not on it. Without confirmation the key is handed out twice; with it,
	// the first claim is refused before anything is sent, and so is the
	// promoted replica's until it has a replica of its own.
	for _, confirm := range []int{0, 1} {
		name := map[int]string{0: "without confirmation the promoted replica hands the key out again",
			1: "with confirmation neither primary grants a claim no replica holds"}[confirm]
		t.Run(name, func(t *testing.T) {
			primary := redistest.Start(t)
			replica := redistest.StartReplicaOf(t, primary)
			onReplica := redis.NewClient(&redis.Options{Addr: replica.Addr()})
			if err := onReplica.Do(t.Context(), "replicaof", "no", "one").Err(); err != nil {
				t.Fatal(err)
			}
			before := newConfirmingStore(t, redis.NewClient(&redis.Options{Addr: primary.Addr()}), confirm, 50*time.Millisecond)
			after := newConfirmingStore(t, onReplica, confirm, 50*time.Millisecond)
			after.prefix = before.prefix
			k := statetest.Key("k")
			owners := 0
			for _, s := range []*Store{before, after} {
				c, err := s.Claim(t.Context(), k, policy.Fingerprint{1}, time.Minute, time.Minute)
				switch {
				case err == nil && c.Outcome == policy.ClaimOwned:
					owners++
				case confirm > 0 && errors.Is(err, ErrUnconfirmed):
				default:
					t.Fatalf("Claim = %v, %v", c.Outcome, err)
				}
			}
			if want := map[int]int{0: 2, 1: 0}[confirm]; owners != want {
				t.Fatalf("%d owners of one key, want %d", owners, want)
			}
		})
	}
}
