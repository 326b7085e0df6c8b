package policy

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/internal/testkit/redistest"
)

// newTestRedisStore returns a store on srv whose keys no other test shares.
func newTestRedisStore(t testing.TB, srv *redistest.Server) (*RedisStore, *redis.Client) {
	return newTestRedisStoreWith(t, &redis.Options{Addr: srv.Addr()})
}

func newTestRedisStoreWith(t testing.TB, opts *redis.Options) (*RedisStore, *redis.Client) {
	client := redis.NewClient(opts)
	s := NewRedisStore(client, RedisOptions{Prefix: "test:" + t.Name() + ":"})
	t.Cleanup(func() { _ = s.Close() })
	return s, client
}

func TestRedisStore(t *testing.T) {
	srv := redistest.Start(t)
	testStoreConformance(t, func(t *testing.T) storeTarget {
		s, _ := newTestRedisStore(t, srv)
		return storeTarget{store: s, advance: time.Sleep}
	})
}

func TestRedisStoreUndecodableValues(t *testing.T) {
	srv := redistest.Start(t)
	fp := Fingerprint{1}
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
			k := idemKey("k1")
			if err := client.Set(ctx, s.key(k), tc.value, time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			c, err := s.Claim(ctx, k, fp, time.Minute, time.Minute)
			if err != nil || c.Outcome != ClaimUnknown || c.Token != "" || !c.Record.Fingerprint.IsZero() || !c.Record.Matches(fp) {
				t.Fatalf("Claim = %+v, %v; want unknown with a zero fingerprint", c, err)
			}
			r, ok, err := s.Get(ctx, k)
			if err != nil || !ok || r.State != RecordUnknown {
				t.Fatalf("Get = %+v, %v, %v; want unknown", r, ok, err)
			}
			if r, err := s.Wait(ctx, k); err != nil || r.State != RecordUnknown {
				t.Fatalf("Wait = %+v, %v; want unknown at once", r, err)
			}
			for _, token := range []string{"", "ANY"} {
				expectLost(t, "Complete", s.Complete(ctx, k, token, []byte(`{}`), time.Minute))
				expectLost(t, "Release", s.Release(ctx, k, token))
			}
			if got, _ := client.Get(ctx, s.key(k)).Result(); got != tc.value {
				t.Fatalf("the value changed to %q", got)
			}
			// A backend that dedupes on the forwarded key may take it over.
			if c, err := s.Reclaim(ctx, k, fp, time.Minute, time.Minute); err != nil || c.Outcome != ClaimOwned {
				t.Fatalf("Reclaim = %v, %v; want owned", c.Outcome, err)
			}
		})
	}
}

func TestRedisStoreEncoding(t *testing.T) {
	srv := redistest.Start(t)
	s, client := newTestRedisStore(t, srv)
	ctx := t.Context()
	k := idemKey("k1")
	fp := idemFingerprint(t, `{"text":"hi"}`)
	c, err := s.Claim(ctx, k, fp, 2*time.Second, time.Hour)
	if err != nil || c.Outcome != ClaimOwned {
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
		k := idemKey("k2")
		c, err := s.Claim(ctx, k, fp, 3*time.Second, time.Hour)
		if err != nil || c.Outcome != ClaimOwned {
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
		expectAbsent(t, s, k)
	})

	t.Run("keys have a bounded length and do not collide", func(t *testing.T) {
		long := s.key(IdempotencyKey{Caller: strings.Repeat("c", 10000), Tool: "t", Key: strings.Repeat("k", 255)})
		if want := len(s.prefix) + 64; len(long) != want {
			t.Fatalf("key length %d, want %d", len(long), want)
		}
		a := s.key(IdempotencyKey{Caller: "a", Tool: "bc", Key: "d"})
		b := s.key(IdempotencyKey{Caller: "ab", Tool: "c", Key: "d"})
		z := s.key(IdempotencyKey{Caller: "a\x00", Tool: "bc", Key: "d"})
		if a == b || a == z || b == z {
			t.Fatal("distinct keys share a Redis key")
		}
		if !strings.HasPrefix(a, s.prefix) {
			t.Fatalf("key %q lacks the prefix", a)
		}
	})

	t.Run("the default prefix applies", func(t *testing.T) {
		d := NewRedisStore(client, RedisOptions{})
		if key := d.key(k); !strings.HasPrefix(key, DefaultRedisPrefix) {
			t.Fatalf("key %q, want prefix %q", key, DefaultRedisPrefix)
		}
	})
}

func TestRedisStoreSurvivesRestart(t *testing.T) {
	srv := redistest.Start(t)
	// go-redis retries a refused dial five times and a failed command three
	// times by default (about 1.7s); a store that fails closed wants it fast.
	s, _ := newTestRedisStoreWith(t, &redis.Options{Addr: srv.Addr(), DialerRetries: 1, MaxRetries: -1})
	fp := Fingerprint{1}
	mustClaim(t, s, idemKey("before"), fp, time.Minute, time.Minute)

	srv.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := s.Claim(ctx, idemKey("down"), fp, time.Minute, time.Minute); err == nil {
		t.Fatal("Claim succeeded while Redis was down")
	}
	if err := s.Complete(ctx, idemKey("before"), "ANY", []byte(`{}`), time.Minute); err == nil || errors.Is(err, ErrLostClaim) {
		t.Fatalf("Complete while Redis was down = %v, want a store error", err)
	}
	if _, _, err := s.Get(ctx, idemKey("before")); err == nil {
		t.Fatal("Get succeeded while Redis was down")
	}
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping succeeded while Redis was down")
	}
	if _, err := s.Wait(ctx, idemKey("before")); err == nil || errors.Is(err, ErrNoRecord) || ctx.Err() != nil {
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
	mustClaim(t, s, idemKey("after"), fp, time.Minute, time.Minute)
	// Without persistence the restarted server forgot every record.
	mustClaim(t, s, idemKey("before"), fp, time.Minute, time.Minute)
}

func BenchmarkRedisStoreClaimComplete(b *testing.B) {
	srv := redistest.Start(b)
	s, _ := newTestRedisStore(b, srv)
	ctx := b.Context()
	prefix := strconv.FormatInt(time.Now().UnixNano(), 10) + "-"
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		k := idemKey(prefix + strconv.Itoa(i))
		c, err := s.Claim(ctx, k, Fingerprint{1}, time.Minute, time.Minute)
		if err != nil || c.Outcome != ClaimOwned {
			b.Fatalf("Claim = %v, %v", c.Outcome, err)
		}
		if err := s.Complete(ctx, k, c.Token, benchEnvelope, time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}
