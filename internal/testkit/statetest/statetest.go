// Package statetest is the conformance suites of policy's state
// interfaces: every policy.IdempotencyStore and every policy.BudgetStore
// (the memory ones in policy, the Redis ones in policy/redisstate) runs
// the same suite, as go-cloud's drivertest runs one suite against every
// driver. The helpers the suites use are exported for the stores' own
// tests.
package statetest

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolgate/toolgate/policy"
)

// ManualClock is a clock tests move by hand.
type ManualClock struct {
	mu  sync.Mutex
	now time.Time
}

// NewManualClock is a clock standing at t.
func NewManualClock(t time.Time) *ManualClock { return &ManualClock{now: t} }

// Now is the clock's time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// RateCaller is a caller allowed every tool, with a rate and per-tool rates.
func RateCaller(name string, rate *policy.RateSettings, toolRates map[string]policy.RateSettings) *policy.Caller {
	return &policy.Caller{Name: name, Tools: []string{"*"}, Rate: rate, ToolRates: toolRates}
}

// StoreTarget is one idempotency store under test, and how to let time pass
// for it: the memory store's clock moves, the Redis store really waits.
type StoreTarget struct {
	Store   policy.IdempotencyStore
	Advance func(d time.Duration)
}

// Durations of the suite. A "live" lease or ttl never runs out during a test;
// a short one runs out once the test advances by Past.
const (
	Live  = time.Minute
	Short = 50 * time.Millisecond
	Past  = 200 * time.Millisecond
)

// Key is idempotency key key of one caller and tool.
func Key(key string) policy.IdempotencyKey {
	return policy.IdempotencyKey{Caller: "ops-agent", Tool: "send_notification", Key: key}
}

// FingerprintOf is the fingerprint of the arguments args, a JSON object.
func FingerprintOf(t testing.TB, args string) policy.Fingerprint {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(args))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", args, err)
	}
	fp, err := policy.NewFingerprint("send_notification", v)
	if err != nil {
		t.Fatalf("fingerprint %s: %v", args, err)
	}
	return fp
}

// MustClaim claims k and fails the test unless the caller owns it.
func MustClaim(t *testing.T, s policy.IdempotencyStore, k policy.IdempotencyKey, fp policy.Fingerprint, lease, ttl time.Duration) string {
	t.Helper()
	c, err := s.Claim(t.Context(), k, fp, lease, ttl)
	if err != nil {
		t.Fatalf("Claim(%q): %v", k.Key, err)
	}
	if c.Outcome != policy.ClaimOwned || c.Token == "" {
		t.Fatalf("Claim(%q) = %v (token %q), want owned with a token", k.Key, c.Outcome, c.Token)
	}
	return c.Token
}

// ExpectClaim claims k and checks the outcome and, for existing records, the
// state and envelope.
func ExpectClaim(t *testing.T, s policy.IdempotencyStore, k policy.IdempotencyKey, fp policy.Fingerprint, want policy.ClaimOutcome, envelope string) policy.Claim {
	t.Helper()
	c, err := s.Claim(t.Context(), k, fp, Live, Live)
	if err != nil {
		t.Fatalf("Claim(%q): %v", k.Key, err)
	}
	if c.Outcome != want {
		t.Fatalf("Claim(%q) = %v, want %v", k.Key, c.Outcome, want)
	}
	if want != policy.ClaimOwned && string(c.Record.Envelope) != envelope {
		t.Fatalf("Claim(%q) envelope = %q, want %q", k.Key, c.Record.Envelope, envelope)
	}
	return c
}

// ExpectAbsent fails unless the store holds no record of k.
func ExpectAbsent(t *testing.T, s policy.IdempotencyStore, k policy.IdempotencyKey) {
	t.Helper()
	r, ok, err := s.Get(t.Context(), k)
	if err != nil {
		t.Fatalf("Get(%q): %v", k.Key, err)
	}
	if ok {
		t.Fatalf("Get(%q) = %v record, want none", k.Key, r.State)
	}
}

// ExpectLost fails unless err is policy.ErrLostClaim.
func ExpectLost(t *testing.T, op string, err error) {
	t.Helper()
	if !errors.Is(err, policy.ErrLostClaim) {
		t.Fatalf("%s = %v, want ErrLostClaim", op, err)
	}
}

// waitResult is what a Wait in another goroutine returned.
type waitResult struct {
	rec policy.Record
	err error
	at  time.Time
}

func waitAsync(s policy.IdempotencyStore, ctx context.Context, k policy.IdempotencyKey) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		r, err := s.Wait(ctx, k)
		ch <- waitResult{rec: r, err: err, at: time.Now()}
	}()
	return ch
}

func receive(t *testing.T, ch <-chan waitResult) waitResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return within 10s")
		return waitResult{}
	}
}

// RunIdempotencyStoreTests is the behaviour every policy.IdempotencyStore shares.
func RunIdempotencyStoreTests(t *testing.T, newStore func(t *testing.T) StoreTarget) {
	fpA := FingerprintOf(t, `{"user_id":"u1","text":"hello"}`)
	fpB := FingerprintOf(t, `{"user_id":"u1","text":"goodbye"}`)
	const envelope = `{"status":"ok","message":"Sent.","data":{"message_id":"m1"}}`

	t.Run("a claimed key completes and then replays the stored envelope", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		k := Key("k1")
		token := MustClaim(t, s, k, fpA, Live, Live)
		ExpectClaim(t, s, k, fpA, policy.ClaimInFlight, "")
		if err := s.Complete(t.Context(), k, token, []byte(envelope), Live); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		c := ExpectClaim(t, s, k, fpA, policy.ClaimCompleted, envelope)
		if c.Record.State != policy.RecordCompleted || c.Record.Fingerprint != fpA || c.Record.Token != "" || c.Token != "" {
			t.Fatalf("replayed record = %+v, want completed with fingerprint A and no token", c.Record)
		}
		r, ok, err := s.Get(t.Context(), k)
		if err != nil || !ok || r.State != policy.RecordCompleted || string(r.Envelope) != envelope {
			t.Fatalf("Get = %+v, %v, %v; want the completed record", r, ok, err)
		}
	})

	t.Run("a claim reports the in-flight record with its fingerprint and lease", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		k := Key("k1")
		token := MustClaim(t, s, k, fpA, Live, Live)
		c := ExpectClaim(t, s, k, fpA, policy.ClaimInFlight, "")
		r := c.Record
		if r.State != policy.RecordInFlight || r.Fingerprint != fpA || r.Token != token || c.Token != "" {
			t.Fatalf("in-flight record = %+v, want fingerprint A and the owner's token", r)
		}
		if lease := r.LeaseUntil.Sub(r.UpdatedAt); lease < Live-time.Second || lease > Live+time.Second {
			t.Fatalf("lease runs out %v after the claim, want %v", lease, Live)
		}
	})

	t.Run("a reused key with other arguments reports the first fingerprint", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		k := Key("k1")
		token := MustClaim(t, s, k, fpA, Live, Live)
		if c := ExpectClaim(t, s, k, fpB, policy.ClaimInFlight, ""); c.Record.Fingerprint != fpA || c.Record.Matches(fpB) {
			t.Fatal("in-flight record does not carry fingerprint A")
		}
		if err := s.Complete(t.Context(), k, token, []byte(envelope), Live); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if c := ExpectClaim(t, s, k, fpB, policy.ClaimCompleted, envelope); c.Record.Fingerprint != fpA || !c.Record.Matches(fpA) {
			t.Fatal("completed record does not carry fingerprint A")
		}
	})

	t.Run("keys are scoped by caller and tool", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		k := Key("shared")
		MustClaim(t, s, k, fpA, Live, Live)
		MustClaim(t, s, policy.IdempotencyKey{Caller: "research-agent", Tool: k.Tool, Key: k.Key}, fpA, Live, Live)
		MustClaim(t, s, policy.IdempotencyKey{Caller: k.Caller, Tool: "other_tool", Key: k.Key}, fpA, Live, Live)
	})

	t.Run("keys are scoped by identity", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		k := Key("shared")
		alice, bob := k, k
		alice.Scope, bob.Scope = strings.Repeat("a", 64), strings.Repeat("b", 64)
		token := MustClaim(t, s, alice, fpA, Live, Live)
		if err := s.Complete(t.Context(), alice, token, []byte(envelope), Live); err != nil {
			t.Fatal(err)
		}
		ExpectClaim(t, s, alice, fpA, policy.ClaimCompleted, envelope)
		MustClaim(t, s, bob, fpA, Live, Live)
		MustClaim(t, s, k, fpA, Live, Live) // no identity is a scope of its own
	})

	t.Run("the scope key is long enough and stable", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		first, err := s.ScopeKey(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(first) < policy.MinScopeKeyLen {
			t.Fatalf("scope key of %d bytes, want at least %d", len(first), policy.MinScopeKeyLen)
		}
		again, err := s.ScopeKey(t.Context())
		if err != nil || string(again) != string(first) {
			t.Fatalf("second ScopeKey = %x, %v; want the first, %x", again, err, first)
		}
	})

	t.Run("a completed record expires after its ttl", func(t *testing.T) {
		t.Parallel()
		target := newStore(t)
		s := target.Store
		k := Key("k1")
		token := MustClaim(t, s, k, fpA, Live, Live)
		if err := s.Complete(t.Context(), k, token, []byte(envelope), Short); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		target.Advance(Past)
		ExpectAbsent(t, s, k)
		MustClaim(t, s, k, fpB, Live, Live)
	})

	t.Run("mark unknown stores an envelope reported as unknown", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		k := Key("k1")
		token := MustClaim(t, s, k, fpA, Live, Live)
		const unknown = `{"status":"timeout","side_effect":"unknown"}`
		if err := s.MarkUnknown(t.Context(), k, token, []byte(unknown), Live); err != nil {
			t.Fatalf("MarkUnknown: %v", err)
		}
		c := ExpectClaim(t, s, k, fpA, policy.ClaimUnknown, unknown)
		if c.Record.State != policy.RecordUnknown || c.Record.Fingerprint != fpA {
			t.Fatalf("record = %+v, want unknown with fingerprint A", c.Record)
		}
	})

	t.Run("a lease that runs out turns into unknown and the stale owner is refused", func(t *testing.T) {
		t.Parallel()
		target := newStore(t)
		s := target.Store
		k := Key("k1")
		token := MustClaim(t, s, k, fpA, Short, Live)
		target.Advance(Past)
		c := ExpectClaim(t, s, k, fpA, policy.ClaimUnknown, "")
		if c.Record.State != policy.RecordUnknown || c.Record.Fingerprint != fpA || c.Record.Token != "" {
			t.Fatalf("record = %+v, want unknown with fingerprint A and no token", c.Record)
		}
		ExpectLost(t, "Complete by the stale owner", s.Complete(t.Context(), k, token, []byte(envelope), Live))
		ExpectLost(t, "MarkUnknown by the stale owner", s.MarkUnknown(t.Context(), k, token, []byte(envelope), Live))
		ExpectLost(t, "Release by the stale owner", s.Release(t.Context(), k, token))
		ExpectClaim(t, s, k, fpA, policy.ClaimUnknown, "")
	})

	t.Run("get observes a lease that ran out as unknown", func(t *testing.T) {
		t.Parallel()
		target := newStore(t)
		s := target.Store
		k := Key("k1")
		token := MustClaim(t, s, k, fpA, Short, Live)
		target.Advance(Past)
		r, ok, err := s.Get(t.Context(), k)
		if err != nil || !ok || r.State != policy.RecordUnknown {
			t.Fatalf("Get = %+v, %v, %v; want unknown", r, ok, err)
		}
		ExpectLost(t, "Complete by the stale owner", s.Complete(t.Context(), k, token, []byte(envelope), Live))
	})

	t.Run("an owner may finish after its lease while nobody observed the expiry", func(t *testing.T) {
		t.Parallel()
		target := newStore(t)
		s := target.Store
		k := Key("k1")
		token := MustClaim(t, s, k, fpA, Short, Live)
		target.Advance(Past)
		if err := s.Complete(t.Context(), k, token, []byte(envelope), Live); err != nil {
			t.Fatalf("late Complete: %v", err)
		}
		ExpectClaim(t, s, k, fpA, policy.ClaimCompleted, envelope)
	})

	t.Run("an abandoned in-flight record disappears ttl after its lease", func(t *testing.T) {
		t.Parallel()
		target := newStore(t)
		s := target.Store
		k := Key("k1")
		token := MustClaim(t, s, k, fpA, Short, Short)
		target.Advance(Past)
		ExpectLost(t, "Complete after lease and ttl", s.Complete(t.Context(), k, token, []byte(envelope), Live))
		ExpectAbsent(t, s, k)
		MustClaim(t, s, k, fpA, Live, Live)
	})

	t.Run("reclaim takes over an unknown record with a new token", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		k := Key("k1")
		old := MustClaim(t, s, k, fpA, Live, Live)
		if err := s.MarkUnknown(t.Context(), k, old, []byte(`{"status":"timeout"}`), Live); err != nil {
			t.Fatalf("MarkUnknown: %v", err)
		}
		c, err := s.Reclaim(t.Context(), k, fpA, Live, Live)
		if err != nil || c.Outcome != policy.ClaimOwned || c.Token == "" || c.Token == old {
			t.Fatalf("Reclaim = %v (token %q, old %q), %v; want owned with a new token", c.Outcome, c.Token, old, err)
		}
		ExpectClaim(t, s, k, fpA, policy.ClaimInFlight, "")
		ExpectLost(t, "Complete with the old token", s.Complete(t.Context(), k, old, []byte(envelope), Live))
		if err := s.Complete(t.Context(), k, c.Token, []byte(envelope), Live); err != nil {
			t.Fatalf("Complete with the new token: %v", err)
		}
		ExpectClaim(t, s, k, fpA, policy.ClaimCompleted, envelope)
	})

	t.Run("reclaim takes over a lease that ran out", func(t *testing.T) {
		t.Parallel()
		target := newStore(t)
		s := target.Store
		k := Key("k1")
		old := MustClaim(t, s, k, fpA, Short, Live)
		target.Advance(Past)
		c, err := s.Reclaim(t.Context(), k, fpA, Live, Live)
		if err != nil || c.Outcome != policy.ClaimOwned || c.Token == old {
			t.Fatalf("Reclaim = %v, %v; want owned with a new token", c.Outcome, err)
		}
		ExpectLost(t, "Complete with the old token", s.Complete(t.Context(), k, old, []byte(envelope), Live))
	})

	t.Run("reclaim reports a record that is not unknown with the same fingerprint", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		ctx := t.Context()

		inFlight := Key("in-flight")
		MustClaim(t, s, inFlight, fpA, Live, Live)
		if c, err := s.Reclaim(ctx, inFlight, fpA, Live, Live); err != nil || c.Outcome != policy.ClaimInFlight {
			t.Fatalf("Reclaim of an in-flight record = %v, %v; want in flight", c.Outcome, err)
		}

		completed := Key("completed")
		token := MustClaim(t, s, completed, fpA, Live, Live)
		if err := s.Complete(ctx, completed, token, []byte(envelope), Live); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if c, err := s.Reclaim(ctx, completed, fpA, Live, Live); err != nil || c.Outcome != policy.ClaimCompleted || string(c.Record.Envelope) != envelope {
			t.Fatalf("Reclaim of a completed record = %v, %v; want completed", c.Outcome, err)
		}

		other := Key("unknown-other-arguments")
		token = MustClaim(t, s, other, fpA, Live, Live)
		if err := s.MarkUnknown(ctx, other, token, nil, Live); err != nil {
			t.Fatalf("MarkUnknown: %v", err)
		}
		if c, err := s.Reclaim(ctx, other, fpB, Live, Live); err != nil || c.Outcome != policy.ClaimUnknown || c.Record.Fingerprint != fpA {
			t.Fatalf("Reclaim with other arguments = %v, %v; want unknown with fingerprint A", c.Outcome, err)
		}

		if c, err := s.Reclaim(ctx, Key("absent"), fpA, Live, Live); err != nil || c.Outcome != policy.ClaimOwned {
			t.Fatalf("Reclaim of an absent key = %v, %v; want owned", c.Outcome, err)
		}
	})

	t.Run("release lets the key be claimed again", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		k := Key("k1")
		token := MustClaim(t, s, k, fpA, Live, Live)
		ExpectLost(t, "Release with a wrong token", s.Release(t.Context(), k, "WRONG"))
		if err := s.Release(t.Context(), k, token); err != nil {
			t.Fatalf("Release: %v", err)
		}
		ExpectAbsent(t, s, k)
		// A repeat (a client's retry after a lost reply) finds nothing held.
		if err := s.Release(t.Context(), k, token); err != nil {
			t.Fatalf("Release twice: %v", err)
		}
		ExpectAbsent(t, s, k)
		ExpectLost(t, "Complete after Release", s.Complete(t.Context(), k, token, []byte(envelope), Live))
		next := MustClaim(t, s, k, fpB, Live, Live)
		if next == token {
			t.Fatal("a new claim reused the released token")
		}
		ExpectLost(t, "Release by the old owner of a key claimed again", s.Release(t.Context(), k, token))
		ExpectClaim(t, s, k, fpB, policy.ClaimInFlight, "")
	})

	t.Run("releasing a key nobody holds succeeds", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		k := Key("k1")
		if err := s.Release(t.Context(), k, "ANY"); err != nil {
			t.Fatalf("Release of an absent key: %v", err)
		}
		ExpectAbsent(t, s, k)
		MustClaim(t, s, k, fpA, Live, Live)
		ExpectLost(t, "Release with no token", s.Release(t.Context(), Key("k2"), ""))
	})

	t.Run("only the owner token finishes a record, once", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		ctx := t.Context()
		k := Key("k1")
		ExpectLost(t, "Complete of an absent key", s.Complete(ctx, k, "ANY", []byte(envelope), Live))
		token := MustClaim(t, s, k, fpA, Live, Live)
		ExpectLost(t, "Complete with a wrong token", s.Complete(ctx, k, "WRONG", []byte(envelope), Live))
		ExpectLost(t, "Complete with no token", s.Complete(ctx, k, "", []byte(envelope), Live))
		ExpectClaim(t, s, k, fpA, policy.ClaimInFlight, "")
		if err := s.Complete(ctx, k, token, []byte(envelope), Live); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		// A repeat by the same token (a client's retry after a lost reply)
		// succeeds and changes nothing.
		if err := s.Complete(ctx, k, token, []byte(`{"other":true}`), Live); err != nil {
			t.Fatalf("Complete twice: %v", err)
		}
		ExpectLost(t, "Complete by another token after Complete", s.Complete(ctx, k, "WRONG", []byte(envelope), Live))
		ExpectLost(t, "MarkUnknown after Complete", s.MarkUnknown(ctx, k, token, nil, Live))
		ExpectLost(t, "Release after Complete", s.Release(ctx, k, token))
		ExpectClaim(t, s, k, fpA, policy.ClaimCompleted, envelope)

		unknown := Key("k2")
		token = MustClaim(t, s, unknown, fpA, Live, Live)
		if err := s.MarkUnknown(ctx, unknown, token, []byte(envelope), Live); err != nil {
			t.Fatalf("MarkUnknown: %v", err)
		}
		if err := s.MarkUnknown(ctx, unknown, token, nil, Live); err != nil {
			t.Fatalf("MarkUnknown twice: %v", err)
		}
		ExpectLost(t, "Complete after MarkUnknown", s.Complete(ctx, unknown, token, []byte(envelope), Live))
		ExpectClaim(t, s, unknown, fpA, policy.ClaimUnknown, envelope)
	})

	t.Run("stored envelopes are copies", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		k := Key("k1")
		token := MustClaim(t, s, k, fpA, Live, Live)
		buf := []byte(envelope)
		if err := s.Complete(t.Context(), k, token, buf, Live); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		buf[0] = 'X'
		c := ExpectClaim(t, s, k, fpA, policy.ClaimCompleted, envelope)
		c.Record.Envelope[0] = 'Y'
		ExpectClaim(t, s, k, fpA, policy.ClaimCompleted, envelope)
	})

	t.Run("exactly one of 50 concurrent claims owns the key", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		k := Key("k1")
		const n = 50
		outcomes := make([]policy.ClaimOutcome, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				c, err := s.Claim(context.Background(), k, fpA, Live, Live)
				outcomes[i], errs[i] = c.Outcome, err
			})
		}
		close(start)
		wg.Wait()
		owned := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("Claim %d: %v", i, errs[i])
			}
			switch outcomes[i] {
			case policy.ClaimOwned:
				owned++
			case policy.ClaimInFlight:
			default:
				t.Fatalf("Claim %d = %v, want owned or in flight", i, outcomes[i])
			}
		}
		if owned != 1 {
			t.Fatalf("%d claims own the key, want exactly 1", owned)
		}
	})

	t.Run("concurrent callers of one key all end with the one stored result", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		k := Key("k1")
		const n = 20
		ran := make(chan struct{}, n)
		got := make([]string, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				ctx := context.Background()
				c, err := s.Claim(ctx, k, fpA, Live, Live)
				switch {
				case err != nil:
					errs[i] = err
				case c.Outcome == policy.ClaimOwned:
					ran <- struct{}{}
					time.Sleep(20 * time.Millisecond) // the backend call
					errs[i] = s.Complete(ctx, k, c.Token, []byte(envelope), Live)
					got[i] = envelope
				case c.Outcome == policy.ClaimInFlight:
					var r policy.Record
					r, errs[i] = s.Wait(ctx, k)
					got[i] = string(r.Envelope)
				default:
					got[i] = string(c.Record.Envelope)
				}
			})
		}
		close(start)
		wg.Wait()
		if len(ran) != 1 {
			t.Fatalf("the call ran %d times, want once", len(ran))
		}
		for i := range n {
			if errs[i] != nil || got[i] != envelope {
				t.Fatalf("caller %d got %q, %v; want the stored envelope", i, got[i], errs[i])
			}
		}
	})

	t.Run("a waiter gets the completed record as soon as the owner completes", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		k := Key("k1")
		token := MustClaim(t, s, k, fpA, Live, Live)
		ch := waitAsync(s, t.Context(), k)
		time.Sleep(30 * time.Millisecond) // let the waiter block
		select {
		case r := <-ch:
			t.Fatalf("Wait returned %+v, %v while in flight", r.rec, r.err)
		default:
		}
		completed := time.Now()
		if err := s.Complete(t.Context(), k, token, []byte(envelope), Live); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		r := receive(t, ch)
		if r.err != nil || r.rec.State != policy.RecordCompleted || string(r.rec.Envelope) != envelope {
			t.Fatalf("Wait = %+v, %v; want the completed record", r.rec, r.err)
		}
		if lag := r.at.Sub(completed); lag > time.Second {
			t.Fatalf("Wait returned %v after Complete, want promptly", lag)
		}
	})

	t.Run("wait returns a record that is not in flight at once", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		k := Key("k1")
		token := MustClaim(t, s, k, fpA, Live, Live)
		if err := s.MarkUnknown(t.Context(), k, token, []byte(envelope), Live); err != nil {
			t.Fatalf("MarkUnknown: %v", err)
		}
		r, err := s.Wait(t.Context(), k)
		if err != nil || r.State != policy.RecordUnknown || string(r.Envelope) != envelope {
			t.Fatalf("Wait = %+v, %v; want the unknown record", r, err)
		}
	})

	t.Run("wait returns unknown when the lease runs out", func(t *testing.T) {
		t.Parallel()
		target := newStore(t)
		s := target.Store
		k := Key("k1")
		token := MustClaim(t, s, k, fpA, Short, Live)
		ch := waitAsync(s, t.Context(), k)
		target.Advance(Past)
		r := receive(t, ch)
		if r.err != nil || r.rec.State != policy.RecordUnknown || r.rec.Fingerprint != fpA {
			t.Fatalf("Wait = %+v, %v; want unknown", r.rec, r.err)
		}
		ExpectLost(t, "Complete by the stale owner", s.Complete(t.Context(), k, token, []byte(envelope), Live))
	})

	t.Run("wait reports a released record as gone", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		k := Key("k1")
		if _, err := s.Wait(t.Context(), k); !errors.Is(err, policy.ErrNoRecord) {
			t.Fatalf("Wait for an absent key = %v, want ErrNoRecord", err)
		}
		token := MustClaim(t, s, k, fpA, Live, Live)
		ch := waitAsync(s, t.Context(), k)
		time.Sleep(20 * time.Millisecond)
		if err := s.Release(t.Context(), k, token); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if r := receive(t, ch); !errors.Is(r.err, policy.ErrNoRecord) {
			t.Fatalf("Wait = %+v, %v; want ErrNoRecord", r.rec, r.err)
		}
	})

	t.Run("wait honours its context", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		k := Key("k1")
		MustClaim(t, s, k, fpA, Live, Live)

		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		began := time.Now()
		if _, err := s.Wait(ctx, k); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait = %v, want context.DeadlineExceeded", err)
		}
		if took := time.Since(began); took > 2*time.Second {
			t.Fatalf("Wait took %v past a 50ms deadline", took)
		}

		ctx, cancel = context.WithCancel(t.Context())
		ch := waitAsync(s, ctx, k)
		time.Sleep(20 * time.Millisecond)
		cancel()
		if r := receive(t, ch); !errors.Is(r.err, context.Canceled) {
			t.Fatalf("Wait = %v, want context.Canceled", r.err)
		}
	})

	t.Run("durations must be positive", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		k := Key("k1")
		if _, err := s.Claim(t.Context(), k, fpA, 0, Live); err == nil {
			t.Fatal("Claim with a zero lease succeeded")
		}
		if _, err := s.Claim(t.Context(), k, fpA, Live, -time.Second); err == nil {
			t.Fatal("Claim with a negative ttl succeeded")
		}
		token := MustClaim(t, s, k, fpA, Live, Live)
		if err := s.Complete(t.Context(), k, token, []byte(envelope), 0); err == nil || errors.Is(err, policy.ErrLostClaim) {
			t.Fatalf("Complete with a zero ttl = %v, want a usage error", err)
		}
	})

	t.Run("a store answers ping until closed", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).Store
		if err := s.Ping(t.Context()); err != nil {
			t.Fatalf("Ping: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := s.Ping(t.Context()); err == nil {
			t.Fatal("Ping after Close succeeded")
		}
		if _, err := s.Claim(t.Context(), Key("k1"), fpA, Live, Live); err == nil {
			t.Fatal("Claim after Close succeeded")
		}
	})
}

// BudgetT0 is 2023-11-14 22:13:20 UTC: 13m20s into an hour-long window.
var BudgetT0 = time.Unix(1_700_000_000, 0)

// BudgetTarget is one policy.BudgetStore under test, on a clock the test moves.
type BudgetTarget struct {
	Store policy.BudgetStore
	Clock *ManualClock
}

// MustSpend spends and fails the test on an error.
func MustSpend(t *testing.T, s policy.BudgetStore, caller string, cost float64, b policy.BudgetSettings) policy.BudgetCharge {
	t.Helper()
	ch, err := s.Spend(t.Context(), caller, cost, b)
	if err != nil {
		t.Fatalf("Spend(%s, %v): %v", caller, cost, err)
	}
	return ch
}

// ExpectSpend spends and fails unless the answer is ok with resetIn.
func ExpectSpend(t *testing.T, s policy.BudgetStore, caller string, cost float64, b policy.BudgetSettings, ok bool, resetIn time.Duration) policy.BudgetCharge {
	t.Helper()
	ch := MustSpend(t, s, caller, cost, b)
	if ch.OK != ok || ch.ResetIn != resetIn {
		t.Fatalf("Spend(%s, %v) = ok %v, reset in %v; want %v, %v", caller, cost, ch.OK, ch.ResetIn, ok, resetIn)
	}
	if ch.Caller != caller || ch.Cost != cost {
		t.Fatalf("the charge names %s, %v; want %s, %v", ch.Caller, ch.Cost, caller, cost)
	}
	if ch.OK != !ch.Window.IsZero() {
		t.Fatalf("charge %+v: a window must be named exactly when the cost was taken", ch)
	}
	return ch
}

// MustRefund refunds ch and fails the test on an error.
func MustRefund(t *testing.T, s policy.BudgetStore, ch policy.BudgetCharge) {
	t.Helper()
	if err := s.Refund(t.Context(), ch); err != nil {
		t.Fatalf("Refund(%+v): %v", ch, err)
	}
}

// RunBudgetStoreTests is the behaviour every policy.BudgetStore shares. newStore
// returns a fresh store, empty for every caller name, whose clock starts at
// BudgetT0.
func RunBudgetStoreTests(t *testing.T, newStore func(t *testing.T) BudgetTarget) {
	hourly := policy.BudgetSettings{Cost: 1.0, Per: time.Hour}
	const left = 46*time.Minute + 40*time.Second // of the window at BudgetT0

	t.Run("spending stops at the limit until the window resets", func(t *testing.T) {
		s := newStore(t)
		for range 3 {
			ExpectSpend(t, s.Store, "ops-agent", 0.3, hourly, true, left)
		}
		ExpectSpend(t, s.Store, "ops-agent", 0.3, hourly, false, left)
		s.Clock.Advance(40 * time.Minute)
		ExpectSpend(t, s.Store, "ops-agent", 0.3, hourly, false, left-40*time.Minute)
		ch := ExpectSpend(t, s.Store, "ops-agent", 0.1, hourly, true, left-40*time.Minute) // exactly 1.0
		if want := time.Unix(1_699_999_200, 0); !ch.Window.Equal(want) {
			t.Fatalf("window %v, want %v", ch.Window, want)
		}
		ExpectSpend(t, s.Store, "ops-agent", 0.000001, hourly, false, left-40*time.Minute)
		s.Clock.Advance(left - 40*time.Minute - time.Nanosecond)
		ExpectSpend(t, s.Store, "ops-agent", 0.1, hourly, false, time.Nanosecond)
		s.Clock.Advance(time.Nanosecond)
		ch = ExpectSpend(t, s.Store, "ops-agent", 1.0, hourly, true, time.Hour)
		if want := time.Unix(1_700_002_800, 0); !ch.Window.Equal(want) {
			t.Fatalf("window %v, want %v", ch.Window, want)
		}
		ExpectSpend(t, s.Store, "ops-agent", 0.1, hourly, false, time.Hour)
	})

	t.Run("a cost larger than the budget is always refused", func(t *testing.T) {
		s := newStore(t)
		ExpectSpend(t, s.Store, "ops-agent", 1.5, hourly, false, left)
		ExpectSpend(t, s.Store, "ops-agent", 1.0, hourly, true, left)
	})

	t.Run("sums of decimal costs do not drift", func(t *testing.T) {
		s := newStore(t)
		b := policy.BudgetSettings{Cost: 3.7, Per: time.Hour}
		for i := range 37 {
			if ch := MustSpend(t, s.Store, "ops-agent", 0.1, b); !ch.OK {
				t.Fatalf("spend %d of 37 refused", i+1)
			}
		}
		ExpectSpend(t, s.Store, "ops-agent", 0.1, b, false, left)
	})

	t.Run("zero costs always pass and leave the budget alone", func(t *testing.T) {
		s := newStore(t)
		ExpectSpend(t, s.Store, "ops-agent", 1.0, hourly, true, left)
		for _, cost := range []float64{0, -1, 0.0000004} {
			ch := MustSpend(t, s.Store, "ops-agent", cost, hourly)
			if !ch.OK || ch.ResetIn != 0 || !ch.Window.IsZero() {
				t.Fatalf("Spend(%v) = %+v; want ok, no window", cost, ch)
			}
			MustRefund(t, s.Store, ch)
		}
		if ch, err := s.Store.Spend(t.Context(), "ops-agent", 0, policy.BudgetSettings{}); err != nil || !ch.OK {
			t.Fatalf("a zero cost under invalid settings: %+v, %v; want ok", ch, err)
		}
		ExpectSpend(t, s.Store, "ops-agent", 0.1, hourly, false, left)
	})

	t.Run("callers have separate budgets", func(t *testing.T) {
		s := newStore(t)
		ExpectSpend(t, s.Store, "ops-agent", 1.0, hourly, true, left)
		ExpectSpend(t, s.Store, "research-agent", 1.0, hourly, true, left)
		ExpectSpend(t, s.Store, "ops-agent", 0.1, hourly, false, left)
	})

	t.Run("windows are aligned to the Unix epoch", func(t *testing.T) {
		s := newStore(t)
		// 7h does not divide a day: Go's zero-time Truncate would disagree.
		b := policy.BudgetSettings{Cost: 1, Per: 7 * time.Hour}
		ch := ExpectSpend(t, s.Store, "ops-agent", 0.5, b, true, 17_200*time.Second)
		if want := time.Unix(1_699_992_000, 0); !ch.Window.Equal(want) {
			t.Fatalf("window %v, want %v", ch.Window, want)
		}
	})

	t.Run("a new limit applies to what the window already spent", func(t *testing.T) {
		s := newStore(t)
		ExpectSpend(t, s.Store, "ops-agent", 0.9, hourly, true, left)
		ExpectSpend(t, s.Store, "ops-agent", 0.2, hourly, false, left)
		raised := policy.BudgetSettings{Cost: 2, Per: time.Hour}
		ExpectSpend(t, s.Store, "ops-agent", 1.1, raised, true, left)
		ExpectSpend(t, s.Store, "ops-agent", 0.1, raised, false, left)
	})

	t.Run("a refund gives the cost back to its window", func(t *testing.T) {
		s := newStore(t)
		ExpectSpend(t, s.Store, "ops-agent", 0.6, hourly, true, left)
		ch := ExpectSpend(t, s.Store, "ops-agent", 0.4, hourly, true, left)
		ExpectSpend(t, s.Store, "ops-agent", 0.4, hourly, false, left)
		MustRefund(t, s.Store, ch)
		ExpectSpend(t, s.Store, "ops-agent", 0.4, hourly, true, left)
		ExpectSpend(t, s.Store, "ops-agent", 0.1, hourly, false, left)
	})

	t.Run("refunding a refused charge gives nothing back", func(t *testing.T) {
		s := newStore(t)
		ExpectSpend(t, s.Store, "ops-agent", 1.0, hourly, true, left)
		refused := ExpectSpend(t, s.Store, "ops-agent", 0.5, hourly, false, left)
		MustRefund(t, s.Store, refused)
		MustRefund(t, s.Store, policy.BudgetCharge{})
		ExpectSpend(t, s.Store, "ops-agent", 0.1, hourly, false, left)
	})

	t.Run("a refund never takes a window below zero", func(t *testing.T) {
		s := newStore(t)
		ch := ExpectSpend(t, s.Store, "ops-agent", 0.2, hourly, true, left)
		ch.Cost = 0.9 // more than was spent
		MustRefund(t, s.Store, ch)
		ExpectSpend(t, s.Store, "ops-agent", 1.0, hourly, true, left)
		ExpectSpend(t, s.Store, "ops-agent", 0.1, hourly, false, left)
	})

	t.Run("a refund after the window ended does not credit the next one", func(t *testing.T) {
		s := newStore(t)
		ch := ExpectSpend(t, s.Store, "ops-agent", 1.0, hourly, true, left)
		s.Clock.Advance(left)
		ExpectSpend(t, s.Store, "ops-agent", 1.0, hourly, true, time.Hour)
		MustRefund(t, s.Store, ch)
		ExpectSpend(t, s.Store, "ops-agent", 0.1, hourly, false, time.Hour)
	})

	t.Run("invalid settings are an error", func(t *testing.T) {
		s := newStore(t)
		for _, b := range []policy.BudgetSettings{{Cost: 0, Per: time.Hour}, {Cost: -1, Per: time.Hour}, {Cost: 1, Per: 0}, {Cost: 1, Per: time.Microsecond}} {
			if _, err := s.Store.Spend(t.Context(), "ops-agent", 0.1, b); !errors.Is(err, policy.ErrBudgetSettings) {
				t.Errorf("Spend with %+v: %v; want %v", b, err, policy.ErrBudgetSettings)
			}
		}
	})

	t.Run("concurrent spends never overshoot", func(t *testing.T) {
		s := newStore(t)
		b := policy.BudgetSettings{Cost: 3.7, Per: time.Hour}
		var spent atomic.Int64
		var wg sync.WaitGroup
		for range 100 {
			wg.Go(func() {
				ch, err := s.Store.Spend(context.Background(), "ops-agent", 0.1, b)
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

	t.Run("what was spent is read without spending", func(t *testing.T) {
		s := newStore(t)
		in, ok := s.Store.(policy.BudgetInspector)
		if !ok {
			t.Fatalf("%T does not tell what was spent (policy.BudgetInspector)", s.Store)
		}
		expect := func(caller string, want float64, resetIn time.Duration) {
			t.Helper()
			spent, left, err := in.Spent(t.Context(), caller, hourly)
			if err != nil || spent != want || left != resetIn {
				t.Fatalf("Spent(%s) = %v, %v, %v; want %v, %v", caller, spent, left, err, want, resetIn)
			}
		}
		expect("ops-agent", 0, left)
		ch := ExpectSpend(t, s.Store, "ops-agent", 0.3, hourly, true, left)
		ExpectSpend(t, s.Store, "ops-agent", 0.4, hourly, true, left)
		expect("ops-agent", 0.7, left)
		expect("other-agent", 0, left)
		MustRefund(t, s.Store, ch)
		expect("ops-agent", 0.4, left)
		s.Clock.Advance(left)
		expect("ops-agent", 0, time.Hour)
		if spent, resetIn, err := in.Spent(t.Context(), "ops-agent", policy.BudgetSettings{}); spent != 0 || resetIn != 0 || err != nil {
			t.Fatalf("Spent with settings the compiler refuses = %v, %v, %v", spent, resetIn, err)
		}
	})
}
