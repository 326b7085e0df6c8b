package redisstate

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/internal/testkit/redistest"
	"github.com/toolgate/toolgate/internal/testkit/statetest"
	"github.com/toolgate/toolgate/policy"
)

// newTestRedisStore returns a store on srv whose keys no other test shares.
func newTestRedisStore(t testing.TB, srv *redistest.Server) (*Store, *redis.Client) {
	return newTestRedisStoreWith(t, &redis.Options{Addr: srv.Addr()})
}

func newTestRedisStoreWith(t testing.TB, opts *redis.Options) (*Store, *redis.Client) {
	client := redis.NewClient(opts)
	s := NewStore(client, StoreOptions{Prefix: "test:" + t.Name() + ":"})
	t.Cleanup(func() { _ = s.Close() })
	return s, client
}

func TestRedisStore(t *testing.T) {
	srv := redistest.Start(t)
	statetest.RunIdempotencyStoreTests(t, func(t *testing.T) statetest.StoreTarget {
		s, _ := newTestRedisStore(t, srv)
		return statetest.StoreTarget{Store: s, Advance: time.Sleep}
	})
}

func TestRedisStoreUndecodableValues(t *testing.T) {
	srv := redistest.Start(t)
	fp := policy.Fingerprint{1}
	hexFP := fp.String()
	for _, tc := range []struct {
		name  string
		value string
	}{
		{"garbage", "garbage"},
		{"an empty value", ""},
		{"a future encoding", "2:C:" + hexFP + "::0:1000:0:{}"},
		{"an unknown state", "1:X:" + hexFP + "::0:1000:0:{}"},
		{"a short fingerprint", "1:C:abcd::0:1000:0:{}"},
		{"an in-flight record without a token", "1:F:" + hexFP + "::99999999999999:1000:0:"},
		{"a tombstone without a token", "1:R:" + hexFP + "::0:0:0:"},
		{"a signed number", "1:C:" + hexFP + "::+0:1000:0:{}"},
		{"missing fields", "1:C:" + hexFP},
	} {
		t.Run(tc.name+" is reported as unknown and owned by nobody", func(t *testing.T) {
			s, client := newTestRedisStore(t, srv)
			ctx := t.Context()
			k := statetest.Key("k1")
			if err := client.Set(ctx, s.key(k), tc.value, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			c, err := s.Claim(ctx, k, fp, time.Minute, time.Minute)
			if err != nil || c.Outcome != policy.ClaimUnknown || c.Token != "" || !c.Record.Fingerprint.IsZero() || !c.Record.Matches(fp) {
				t.Fatalf("Claim = %+v, %v; want unknown with a zero fingerprint", c, err)
			}
			r, ok, err := s.Get(ctx, k)
			if err != nil || !ok || r.State != policy.RecordUnknown {
				t.Fatalf("Get = %+v, %v, %v; want unknown", r, ok, err)
			}
			if r, err := s.Wait(ctx, k); err != nil || r.State != policy.RecordUnknown {
				t.Fatalf("Wait = %+v, %v; want unknown at once", r, err)
			}
			for _, token := range []string{"", "ANY"} {
				statetest.ExpectLost(t, "Complete", s.Complete(ctx, k, token, []byte(`{}`), time.Minute))
				statetest.ExpectLost(t, "Release", s.Release(ctx, k, token))
			}
			if got, _ := client.Get(ctx, s.key(k)).Result(); got != tc.value {
				t.Fatalf("the value changed to %q", got)
			}
			// A backend that dedupes on the forwarded key may take it over.
			if c, err := s.Reclaim(ctx, k, fp, time.Minute, time.Minute); err != nil || c.Outcome != policy.ClaimOwned {
				t.Fatalf("Reclaim = %v, %v; want owned", c.Outcome, err)
			}
		})
	}
}

func TestRedisStoreEncoding(t *testing.T) {
	srv := redistest.Start(t)
	s, client := newTestRedisStore(t, srv)
	ctx := t.Context()
	k := statetest.Key("k1")
	fp := statetest.FingerprintOf(t, `{"text":"hi"}`)
	c, err := s.Claim(ctx, k, fp, 2*time.Second, time.Hour)
	if err != nil || c.Outcome != policy.ClaimOwned {
		t.Fatalf("Claim = %v, %v", c.Outcome, err)
	}

	t.Run("an in-flight key lives for its lease plus the ttl", func(t *testing.T) {
		raw := client.Get(ctx, s.key(k)).Val()
		want := "1:F:" + fp.String() + ":" + c.Token + ":" + strconv.FormatInt(c.Record.LeaseUntil.UnixMilli(), 10) + ":3600000:"
		if !strings.HasPrefix(raw, want) || !strings.HasSuffix(raw, ":") {
			t.Fatalf("value = %q, want %q<updated at>:", raw, want)
		}
		if pttl := client.PTTL(ctx, s.key(k)).Val(); pttl <= time.Hour || pttl > time.Hour+2*time.Second {
			t.Fatalf("PTTL = %v, want lease + ttl", pttl)
		}
	})

	t.Run("a completed key lives for its ttl and holds the finishing token and the envelope verbatim", func(t *testing.T) {
		envelope := "{\"message\":\"a:b:c\",\"x\":\"\x00\xff\"}"
		if err := s.Complete(ctx, k, c.Token, []byte(envelope), 10*time.Minute); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		raw := client.Get(ctx, s.key(k)).Val()
		if want := "1:C:" + fp.String() + ":" + c.Token + ":0:600000:"; !strings.HasPrefix(raw, want) || !strings.HasSuffix(raw, ":"+envelope) {
			t.Fatalf("value = %q, want %q<updated at>:<envelope>", raw, want)
		}
		if pttl := client.PTTL(ctx, s.key(k)).Val(); pttl <= 9*time.Minute || pttl > 10*time.Minute {
			t.Fatalf("PTTL = %v, want the ttl", pttl)
		}
		r, ok, err := s.Get(ctx, k)
		if err != nil || !ok || string(r.Envelope) != envelope || r.Token != "" {
			t.Fatalf("Get = %q (token %q), %v, %v; want the envelope and no token", r.Envelope, r.Token, ok, err)
		}
	})

	t.Run("a released key is a tombstone for the claim's lease, read as no record", func(t *testing.T) {
		k := statetest.Key("k2")
		c, err := s.Claim(ctx, k, fp, 3*time.Second, time.Hour)
		if err != nil || c.Outcome != policy.ClaimOwned {
			t.Fatalf("Claim = %v, %v", c.Outcome, err)
		}
		if err := s.Release(ctx, k, c.Token); err != nil {
			t.Fatalf("Release: %v", err)
		}
		raw := client.Get(ctx, s.key(k)).Val()
		if want := "1:R:" + fp.String() + ":" + c.Token + ":0:0:"; !strings.HasPrefix(raw, want) || !strings.HasSuffix(raw, ":") {
			t.Fatalf("value = %q, want %q<updated at>:", raw, want)
		}
		if pttl := client.PTTL(ctx, s.key(k)).Val(); pttl <= 2*time.Second || pttl > 3*time.Second {
			t.Fatalf("PTTL = %v, want the lease", pttl)
		}
		statetest.ExpectAbsent(t, s, k)
	})

	t.Run("keys have a bounded length and do not collide", func(t *testing.T) {
		long := s.key(policy.IdempotencyKey{Caller: strings.Repeat("c", 10000), Tool: "t", Key: strings.Repeat("k", 255)})
		if want := len(s.prefix) + 64; len(long) != want {
			t.Fatalf("key length %d, want %d", len(long), want)
		}
		a := s.key(policy.IdempotencyKey{Caller: "a", Tool: "bc", Key: "d"})
		b := s.key(policy.IdempotencyKey{Caller: "ab", Tool: "c", Key: "d"})
		z := s.key(policy.IdempotencyKey{Caller: "a\x00", Tool: "bc", Key: "d"})
		if a == b || a == z || b == z {
			t.Fatal("distinct keys share a Redis key")
		}
		if !strings.HasPrefix(a, s.prefix) {
			t.Fatalf("key %q lacks the prefix", a)
		}
	})

	t.Run("the default prefix applies", func(t *testing.T) {
		d := NewStore(client, StoreOptions{})
		if key := d.key(k); !strings.HasPrefix(key, DefaultPrefix) {
			t.Fatalf("key %q, want prefix %q", key, DefaultPrefix)
		}
	})
}

func TestRedisStoreSurvivesRestart(t *testing.T) {
	srv := redistest.Start(t)
	// go-redis retries a refused dial five times and a failed command three
	// times by default (about 1.7s); a store that fails closed wants it fast.
	s, _ := newTestRedisStoreWith(t, &redis.Options{Addr: srv.Addr(), DialerRetries: 1, MaxRetries: -1})
	fp := policy.Fingerprint{1}
	statetest.MustClaim(t, s, statetest.Key("before"), fp, time.Minute, time.Minute)

	srv.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := s.Claim(ctx, statetest.Key("down"), fp, time.Minute, time.Minute); err == nil {
		t.Fatal("Claim succeeded while Redis was down")
	}
	if err := s.Complete(ctx, statetest.Key("before"), "ANY", []byte(`{}`), time.Minute); err == nil || errors.Is(err, policy.ErrLostClaim) {
		t.Fatalf("Complete while Redis was down = %v, want a store error", err)
	}
	if _, _, err := s.Get(ctx, statetest.Key("before")); err == nil {
		t.Fatal("Get succeeded while Redis was down")
	}
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping succeeded while Redis was down")
	}
	if _, err := s.Wait(ctx, statetest.Key("before")); err == nil || errors.Is(err, policy.ErrNoRecord) || ctx.Err() != nil {
		t.Fatalf("Wait while Redis was down = %v, want a store error", err)
	}

	srv.Restart()
	deadline := time.Now().Add(5 * time.Second)
	for s.Ping(t.Context()) != nil {
		if time.Now().After(deadline) {
			t.Fatal("the store did not answer within 5s of the restart")
		}
		time.Sleep(10 * time.Millisecond)
	}
	statetest.MustClaim(t, s, statetest.Key("after"), fp, time.Minute, time.Minute)
	// Without persistence the restarted server forgot every record.
	statetest.MustClaim(t, s, statetest.Key("before"), fp, time.Minute, time.Minute)
}

// benchEnvelope is a 1 KiB envelope, as the memory store's benchmark stores.
var benchEnvelope = bytes.Repeat([]byte("x"), 1024)

func BenchmarkRedisStoreClaimComplete(b *testing.B) {
	srv := redistest.Start(b)
	s, _ := newTestRedisStore(b, srv)
	ctx := b.Context()
	prefix := strconv.FormatInt(time.Now().UnixNano(), 10) + "-"
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		k := statetest.Key(prefix + strconv.Itoa(i))
		c, err := s.Claim(ctx, k, policy.Fingerprint{1}, time.Minute, time.Minute)
		if err != nil || c.Outcome != policy.ClaimOwned {
			b.Fatalf("Claim = %v, %v", c.Outcome, err)
		}
		if err := s.Complete(ctx, k, c.Token, benchEnvelope, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRedisStoreScopeKey: every store on one Redis hashes identities with
// the one key the first of them created there, whatever their prefix's
// other keys; a Redis that lost it gets the same key back from a store
// that held it, and a key an operator set is the one used.
func TestRedisStoreScopeKey(t *testing.T) {
	srv := redistest.Start(t)
	prefix := "test:" + t.Name() + ":"
	newStore := func(now func() time.Time) *Store {
		s := NewStore(redis.NewClient(&redis.Options{Addr: srv.Addr()}), StoreOptions{Prefix: prefix, Now: now})
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	clock := time.Unix(1_700_000_000, 0)
	now := func() time.Time { return clock }
	a, b := newStore(now), newStore(now)
	keyA, err := a.ScopeKey(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	keyB, err := b.ScopeKey(t.Context())
	if err != nil || string(keyB) != string(keyA) {
		t.Fatalf("the second replica's key = %q, %v; want the first's", keyB, err)
	}
	check := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = check.Close() })
	if v, err := check.Get(t.Context(), prefix+ScopeKeyName).Result(); err != nil || v != string(keyA) {
		t.Fatalf("Redis holds %q, %v; want the key", v, err)
	}

	t.Run("a Redis that lost the key gets the same one back", func(t *testing.T) {
		if err := check.Del(t.Context(), prefix+ScopeKeyName).Err(); err != nil {
			t.Fatal(err)
		}
		clock = clock.Add(scopeKeyCheck) // the next call checks
		again, err := a.ScopeKey(t.Context())
		if err != nil || string(again) != string(keyA) {
			t.Fatalf("key after the loss = %q, %v; want the one held", again, err)
		}
		if fresh, err := newStore(now).ScopeKey(t.Context()); err != nil || string(fresh) != string(keyA) {
			t.Fatalf("a replica started after the loss reads %q, %v; want the one restored", fresh, err)
		}
	})
	t.Run("a key set in Redis is adopted at the next check", func(t *testing.T) {
		if held, err := b.ScopeKey(t.Context()); err != nil || string(held) != string(keyA) {
			t.Fatalf("key = %q, %v; want the first replica's", held, err)
		}
		set := strings.Repeat("operator-key-", 4)
		if err := check.Set(t.Context(), prefix+ScopeKeyName, set, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if held, _ := b.ScopeKey(t.Context()); string(held) != string(keyA) {
			t.Fatalf("key before the next check = %q; want the one held", held)
		}
		clock = clock.Add(scopeKeyCheck)
		if got, err := b.ScopeKey(t.Context()); err != nil || string(got) != set {
			t.Fatalf("key after the check = %q, %v; want the one set", got, err)
		}
	})
	t.Run("a key too short to be one is refused", func(t *testing.T) {
		if err := check.Set(t.Context(), prefix+ScopeKeyName, "short", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := newStore(now).ScopeKey(t.Context()); err == nil {
			t.Fatalf("ScopeKey = %q, want an error", got)
		}
	})
}

// TestRedisStoreKeyOfAScope: a scope changes the record's Redis key, which
// holds only hashes; a key without one is the key records had before
// scopes existed.
func TestRedisStoreKeyOfAScope(t *testing.T) {
	s := NewStore(redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), StoreOptions{})
	t.Cleanup(func() { _ = s.Close() })
	k := policy.IdempotencyKey{Caller: "ops", Tool: "send", Key: "k-1"}
	scoped := k
	scoped.Scope = policy.IdentityScope([]byte(strings.Repeat("k", 32)), []string{"Authorization"}, map[string][]string{"Authorization": {"Bearer alice-secret"}})
	// The key as it was computed before scopes existed: SHA-256 of the
	// length-prefixed caller, tool and key.
	const unscoped = DefaultPrefix + "07395bb31523180573ef2a9d3afaaa0e0a496c2782ee27260e24c4e2851428ef"
	if got := s.Key(k); got != unscoped {
		t.Errorf("key without a scope = %s, want the one records had before scopes, %s", got, unscoped)
	}
	if got := s.Key(scoped); got == unscoped {
		t.Fatalf("a scope does not change the key: %s", got)
	}
	if strings.Contains(s.Key(scoped), "alice") || strings.Contains(scoped.Scope, "alice") {
		t.Fatalf("the key or scope holds the header's value: %s, %s", s.Key(scoped), scoped.Scope)
	}
}
