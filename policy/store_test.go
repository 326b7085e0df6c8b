package policy

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain checks that no test of the package leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// storeTarget is one idempotency store under test, and how to let time pass
// for it: the memory store's clock moves, the Redis store really waits.
type storeTarget struct {
	store   IdempotencyStore
	advance func(d time.Duration)
}

// Durations of the suite. A "live" lease or ttl never runs out during a test;
// a short one runs out once the test advances by idemPast.
const (
	idemLive  = time.Minute
	idemShort = 50 * time.Millisecond
	idemPast  = 200 * time.Millisecond
)

func idemKey(key string) IdempotencyKey {
	return IdempotencyKey{Caller: "ops-agent", Tool: "send_notification", Key: key}
}

func idemFingerprint(t testing.TB, args string) Fingerprint {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(args))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %s: %v", args, err)
	}
	fp, err := NewFingerprint("send_notification", v)
	if err != nil {
		t.Fatalf("fingerprint %s: %v", args, err)
	}
	return fp
}

// mustClaim claims k and fails the test unless the caller owns it.
func mustClaim(t *testing.T, s IdempotencyStore, k IdempotencyKey, fp Fingerprint, lease, ttl time.Duration) string {
	t.Helper()
	c, err := s.Claim(t.Context(), k, fp, lease, ttl)
	if err != nil {
		t.Fatalf("Claim(%q): %v", k.Key, err)
	}
	if c.Outcome != ClaimOwned || c.Token == "" {
		t.Fatalf("Claim(%q) = %v (token %q), want owned with a token", k.Key, c.Outcome, c.Token)
	}
	return c.Token
}

// expectClaim claims k and checks the outcome and, for existing records, the
// state and envelope.
func expectClaim(t *testing.T, s IdempotencyStore, k IdempotencyKey, fp Fingerprint, want ClaimOutcome, envelope string) Claim {
	t.Helper()
	c, err := s.Claim(t.Context(), k, fp, idemLive, idemLive)
	if err != nil {
		t.Fatalf("Claim(%q): %v", k.Key, err)
	}
	if c.Outcome != want {
		t.Fatalf("Claim(%q) = %v, want %v", k.Key, c.Outcome, want)
	}
	if want != ClaimOwned && string(c.Record.Envelope) != envelope {
		t.Fatalf("Claim(%q) envelope = %q, want %q", k.Key, c.Record.Envelope, envelope)
	}
	return c
}

func expectAbsent(t *testing.T, s IdempotencyStore, k IdempotencyKey) {
	t.Helper()
	r, ok, err := s.Get(t.Context(), k)
	if err != nil {
		t.Fatalf("Get(%q): %v", k.Key, err)
	}
	if ok {
		t.Fatalf("Get(%q) = %v record, want none", k.Key, r.State)
	}
}

func expectLost(t *testing.T, op string, err error) {
	t.Helper()
	if !errors.Is(err, ErrLostClaim) {
		t.Fatalf("%s = %v, want ErrLostClaim", op, err)
	}
}

// waitResult is what a Wait in another goroutine returned.
type waitResult struct {
	rec Record
	err error
	at  time.Time
}

func waitAsync(s IdempotencyStore, ctx context.Context, k IdempotencyKey) <-chan waitResult {
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

// testStoreConformance is the behaviour every IdempotencyStore shares.
func testStoreConformance(t *testing.T, newStore func(t *testing.T) storeTarget) {
	fpA := idemFingerprint(t, `{"user_id":"u1","text":"hello"}`)
	fpB := idemFingerprint(t, `{"user_id":"u1","text":"goodbye"}`)
	const envelope = `{"status":"ok","message":"Sent.","data":{"message_id":"m1"}}`

	t.Run("a claimed key completes and then replays the stored envelope", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).store
		k := idemKey("k1")
		token := mustClaim(t, s, k, fpA, idemLive, idemLive)
		expectClaim(t, s, k, fpA, ClaimInFlight, "")
		if err := s.Complete(t.Context(), k, token, []byte(envelope), idemLive); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		c := expectClaim(t, s, k, fpA, ClaimCompleted, envelope)
		if c.Record.State != RecordCompleted || c.Record.Fingerprint != fpA || c.Record.Token != "" || c.Token != "" {
			t.Fatalf("replayed record = %+v, want completed with fingerprint A and no token", c.Record)
		}
		r, ok, err := s.Get(t.Context(), k)
		if err != nil || !ok || r.State != RecordCompleted || string(r.Envelope) != envelope {
			t.Fatalf("Get = %+v, %v, %v; want the completed record", r, ok, err)
		}
	})

	t.Run("a claim reports the in-flight record with its fingerprint and lease", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).store
		k := idemKey("k1")
		token := mustClaim(t, s, k, fpA, idemLive, idemLive)
		c := expectClaim(t, s, k, fpA, ClaimInFlight, "")
		r := c.Record
		if r.State != RecordInFlight || r.Fingerprint != fpA || r.Token != token || c.Token != "" {
			t.Fatalf("in-flight record = %+v, want fingerprint A and the owner's token", r)
		}
		if lease := r.LeaseUntil.Sub(r.UpdatedAt); lease < idemLive-time.Second || lease > idemLive+time.Second {
			t.Fatalf("lease runs out %v after the claim, want %v", lease, idemLive)
		}
	})

	t.Run("a reused key with other arguments reports the first fingerprint", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).store
		k := idemKey("k1")
		token := mustClaim(t, s, k, fpA, idemLive, idemLive)
		if c := expectClaim(t, s, k, fpB, ClaimInFlight, ""); c.Record.Fingerprint != fpA || c.Record.Matches(fpB) {
			t.Fatal("in-flight record does not carry fingerprint A")
		}
		if err := s.Complete(t.Context(), k, token, []byte(envelope), idemLive); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if c := expectClaim(t, s, k, fpB, ClaimCompleted, envelope); c.Record.Fingerprint != fpA || !c.Record.Matches(fpA) {
			t.Fatal("completed record does not carry fingerprint A")
		}
	})

	t.Run("keys are scoped by caller and tool", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).store
		k := idemKey("shared")
		mustClaim(t, s, k, fpA, idemLive, idemLive)
		mustClaim(t, s, IdempotencyKey{Caller: "research-agent", Tool: k.Tool, Key: k.Key}, fpA, idemLive, idemLive)
		mustClaim(t, s, IdempotencyKey{Caller: k.Caller, Tool: "other_tool", Key: k.Key}, fpA, idemLive, idemLive)
	})

	t.Run("keys are scoped by identity", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).store
		k := idemKey("shared")
		alice, bob := k, k
		alice.Scope, bob.Scope = strings.Repeat("a", 64), strings.Repeat("b", 64)
		token := mustClaim(t, s, alice, fpA, idemLive, idemLive)
		if err := s.Complete(t.Context(), alice, token, []byte(envelope), idemLive); err != nil {
			t.Fatal(err)
		}
		expectClaim(t, s, alice, fpA, ClaimCompleted, envelope)
		mustClaim(t, s, bob, fpA, idemLive, idemLive)
		mustClaim(t, s, k, fpA, idemLive, idemLive) // no identity is a scope of its own
	})

	t.Run("the scope key is long enough and stable", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).store
		first, err := s.ScopeKey(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(first) < MinScopeKeyLen {
			t.Fatalf("scope key of %d bytes, want at least %d", len(first), MinScopeKeyLen)
		}
		again, err := s.ScopeKey(t.Context())
		if err != nil || string(again) != string(first) {
			t.Fatalf("second ScopeKey = %x, %v; want the first, %x", again, err, first)
		}
	})

	t.Run("a completed record expires after its ttl", func(t *testing.T) {
		t.Parallel()
		target := newStore(t)
		s := target.store
		k := idemKey("k1")
		token := mustClaim(t, s, k, fpA, idemLive, idemLive)
		if err := s.Complete(t.Context(), k, token, []byte(envelope), idemShort); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		target.advance(idemPast)
		expectAbsent(t, s, k)
		mustClaim(t, s, k, fpB, idemLive, idemLive)
	})

	t.Run("mark unknown stores an envelope reported as unknown", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).store
		k := idemKey("k1")
		token := mustClaim(t, s, k, fpA, idemLive, idemLive)
		const unknown = `{"status":"timeout","side_effect":"unknown"}`
		if err := s.MarkUnknown(t.Context(), k, token, []byte(unknown), idemLive); err != nil {
			t.Fatalf("MarkUnknown: %v", err)
		}
		c := expectClaim(t, s, k, fpA, ClaimUnknown, unknown)
		if c.Record.State != RecordUnknown || c.Record.Fingerprint != fpA {
			t.Fatalf("record = %+v, want unknown with fingerprint A", c.Record)
		}
	})

	t.Run("a lease that runs out turns into unknown and the stale owner is refused", func(t *testing.T) {
		t.Parallel()
		target := newStore(t)
		s := target.store
		k := idemKey("k1")
		token := mustClaim(t, s, k, fpA, idemShort, idemLive)
		target.advance(idemPast)
		c := expectClaim(t, s, k, fpA, ClaimUnknown, "")
		if c.Record.State != RecordUnknown || c.Record.Fingerprint != fpA || c.Record.Token != "" {
			t.Fatalf("record = %+v, want unknown with fingerprint A and no token", c.Record)
		}
		expectLost(t, "Complete by the stale owner", s.Complete(t.Context(), k, token, []byte(envelope), idemLive))
		expectLost(t, "MarkUnknown by the stale owner", s.MarkUnknown(t.Context(), k, token, []byte(envelope), idemLive))
		expectLost(t, "Release by the stale owner", s.Release(t.Context(), k, token))
		expectClaim(t, s, k, fpA, ClaimUnknown, "")
	})

	t.Run("get observes a lease that ran out as unknown", func(t *testing.T) {
		t.Parallel()
		target := newStore(t)
		s := target.store
		k := idemKey("k1")
		token := mustClaim(t, s, k, fpA, idemShort, idemLive)
		target.advance(idemPast)
		r, ok, err := s.Get(t.Context(), k)
		if err != nil || !ok || r.State != RecordUnknown {
			t.Fatalf("Get = %+v, %v, %v; want unknown", r, ok, err)
		}
		expectLost(t, "Complete by the stale owner", s.Complete(t.Context(), k, token, []byte(envelope), idemLive))
	})

	t.Run("an owner may finish after its lease while nobody observed the expiry", func(t *testing.T) {
		t.Parallel()
		target := newStore(t)
		s := target.store
		k := idemKey("k1")
		token := mustClaim(t, s, k, fpA, idemShort, idemLive)
		target.advance(idemPast)
		if err := s.Complete(t.Context(), k, token, []byte(envelope), idemLive); err != nil {
			t.Fatalf("late Complete: %v", err)
		}
		expectClaim(t, s, k, fpA, ClaimCompleted, envelope)
	})

	t.Run("an abandoned in-flight record disappears ttl after its lease", func(t *testing.T) {
		t.Parallel()
		target := newStore(t)
		s := target.store
		k := idemKey("k1")
		token := mustClaim(t, s, k, fpA, idemShort, idemShort)
		target.advance(idemPast)
		expectLost(t, "Complete after lease and ttl", s.Complete(t.Context(), k, token, []byte(envelope), idemLive))
		expectAbsent(t, s, k)
		mustClaim(t, s, k, fpA, idemLive, idemLive)
	})

	t.Run("reclaim takes over an unknown record with a new token", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).store
		k := idemKey("k1")
		old := mustClaim(t, s, k, fpA, idemLive, idemLive)
		if err := s.MarkUnknown(t.Context(), k, old, []byte(`{"status":"timeout"}`), idemLive); err != nil {
			t.Fatalf("MarkUnknown: %v", err)
		}
		c, err := s.Reclaim(t.Context(), k, fpA, idemLive, idemLive)
		if err != nil || c.Outcome != ClaimOwned || c.Token == "" || c.Token == old {
			t.Fatalf("Reclaim = %v (token %q, old %q), %v; want owned with a new token", c.Outcome, c.Token, old, err)
		}
		expectClaim(t, s, k, fpA, ClaimInFlight, "")
		expectLost(t, "Complete with the old token", s.Complete(t.Context(), k, old, []byte(envelope), idemLive))
		if err := s.Complete(t.Context(), k, c.Token, []byte(envelope), idemLive); err != nil {
			t.Fatalf("Complete with the new token: %v", err)
		}
		expectClaim(t, s, k, fpA, ClaimCompleted, envelope)
	})

	t.Run("reclaim takes over a lease that ran out", func(t *testing.T) {
		t.Parallel()
		target := newStore(t)
		s := target.store
		k := idemKey("k1")
		old := mustClaim(t, s, k, fpA, idemShort, idemLive)
		target.advance(idemPast)
		c, err := s.Reclaim(t.Context(), k, fpA, idemLive, idemLive)
		if err != nil || c.Outcome != ClaimOwned || c.Token == old {
			t.Fatalf("Reclaim = %v, %v; want owned with a new token", c.Outcome, err)
		}
		expectLost(t, "Complete with the old token", s.Complete(t.Context(), k, old, []byte(envelope), idemLive))
	})

	t.Run("reclaim reports a record that is not unknown with the same fingerprint", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).store
		ctx := t.Context()

		inFlight := idemKey("in-flight")
		mustClaim(t, s, inFlight, fpA, idemLive, idemLive)
		if c, err := s.Reclaim(ctx, inFlight, fpA, idemLive, idemLive); err != nil || c.Outcome != ClaimInFlight {
			t.Fatalf("Reclaim of an in-flight record = %v, %v; want in flight", c.Outcome, err)
		}

		completed := idemKey("completed")
		token := mustClaim(t, s, completed, fpA, idemLive, idemLive)
		if err := s.Complete(ctx, completed, token, []byte(envelope), idemLive); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		if c, err := s.Reclaim(ctx, completed, fpA, idemLive, idemLive); err != nil || c.Outcome != ClaimCompleted || string(c.Record.Envelope) != envelope {
			t.Fatalf("Reclaim of a completed record = %v, %v; want completed", c.Outcome, err)
		}

		other := idemKey("unknown-other-arguments")
		token = mustClaim(t, s, other, fpA, idemLive, idemLive)
		if err := s.MarkUnknown(ctx, other, token, nil, idemLive); err != nil {
			t.Fatalf("MarkUnknown: %v", err)
		}
		if c, err := s.Reclaim(ctx, other, fpB, idemLive, idemLive); err != nil || c.Outcome != ClaimUnknown || c.Record.Fingerprint != fpA {
			t.Fatalf("Reclaim with other arguments = %v, %v; want unknown with fingerprint A", c.Outcome, err)
		}

		if c, err := s.Reclaim(ctx, idemKey("absent"), fpA, idemLive, idemLive); err != nil || c.Outcome != ClaimOwned {
			t.Fatalf("Reclaim of an absent key = %v, %v; want owned", c.Outcome, err)
		}
	})

	t.Run("release lets the key be claimed again", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).store
		k := idemKey("k1")
		token := mustClaim(t, s, k, fpA, idemLive, idemLive)
		expectLost(t, "Release with a wrong token", s.Release(t.Context(), k, "WRONG"))
		if err := s.Release(t.Context(), k, token); err != nil {
			t.Fatalf("Release: %v", err)
		}
		expectAbsent(t, s, k)
		// A repeat (a client's retry after a lost reply) finds nothing held.
		if err := s.Release(t.Context(), k, token); err != nil {
			t.Fatalf("Release twice: %v", err)
		}
		expectAbsent(t, s, k)
		expectLost(t, "Complete after Release", s.Complete(t.Context(), k, token, []byte(envelope), idemLive))
		next := mustClaim(t, s, k, fpB, idemLive, idemLive)
		if next == token {
			t.Fatal("a new claim reused the released token")
		}
		expectLost(t, "Release by the old owner of a key claimed again", s.Release(t.Context(), k, token))
		expectClaim(t, s, k, fpB, ClaimInFlight, "")
	})

	t.Run("releasing a key nobody holds succeeds", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).store
		k := idemKey("k1")
		if err := s.Release(t.Context(), k, "ANY"); err != nil {
			t.Fatalf("Release of an absent key: %v", err)
		}
		expectAbsent(t, s, k)
		mustClaim(t, s, k, fpA, idemLive, idemLive)
		expectLost(t, "Release with no token", s.Release(t.Context(), idemKey("k2"), ""))
	})

	t.Run("only the owner token finishes a record, once", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).store
		ctx := t.Context()
		k := idemKey("k1")
		expectLost(t, "Complete of an absent key", s.Complete(ctx, k, "ANY", []byte(envelope), idemLive))
		token := mustClaim(t, s, k, fpA, idemLive, idemLive)
		expectLost(t, "Complete with a wrong token", s.Complete(ctx, k, "WRONG", []byte(envelope), idemLive))
		expectLost(t, "Complete with no token", s.Complete(ctx, k, "", []byte(envelope), idemLive))
		expectClaim(t, s, k, fpA, ClaimInFlight, "")
		if err := s.Complete(ctx, k, token, []byte(envelope), idemLive); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		// A repeat by the same token (a client's retry after a lost reply)
		// succeeds and changes nothing.
		if err := s.Complete(ctx, k, token, []byte(`{"other":true}`), idemLive); err != nil {
			t.Fatalf("Complete twice: %v", err)
		}
		expectLost(t, "Complete by another token after Complete", s.Complete(ctx, k, "WRONG", []byte(envelope), idemLive))
		expectLost(t, "MarkUnknown after Complete", s.MarkUnknown(ctx, k, token, nil, idemLive))
		expectLost(t, "Release after Complete", s.Release(ctx, k, token))
		expectClaim(t, s, k, fpA, ClaimCompleted, envelope)

		unknown := idemKey("k2")
		token = mustClaim(t, s, unknown, fpA, idemLive, idemLive)
		if err := s.MarkUnknown(ctx, unknown, token, []byte(envelope), idemLive); err != nil {
			t.Fatalf("MarkUnknown: %v", err)
		}
		if err := s.MarkUnknown(ctx, unknown, token, nil, idemLive); err != nil {
			t.Fatalf("MarkUnknown twice: %v", err)
		}
		expectLost(t, "Complete after MarkUnknown", s.Complete(ctx, unknown, token, []byte(envelope), idemLive))
		expectClaim(t, s, unknown, fpA, ClaimUnknown, envelope)
	})

	t.Run("stored envelopes are copies", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).store
		k := idemKey("k1")
		token := mustClaim(t, s, k, fpA, idemLive, idemLive)
		buf := []byte(envelope)
		if err := s.Complete(t.Context(), k, token, buf, idemLive); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		buf[0] = 'X'
		c := expectClaim(t, s, k, fpA, ClaimCompleted, envelope)
		c.Record.Envelope[0] = 'Y'
		expectClaim(t, s, k, fpA, ClaimCompleted, envelope)
	})

	t.Run("exactly one of 50 concurrent claims owns the key", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).store
		k := idemKey("k1")
		const n = 50
		outcomes := make([]ClaimOutcome, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				c, err := s.Claim(context.Background(), k, fpA, idemLive, idemLive)
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
			case ClaimOwned:
				owned++
			case ClaimInFlight:
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
		s := newStore(t).store
		k := idemKey("k1")
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
				c, err := s.Claim(ctx, k, fpA, idemLive, idemLive)
				switch {
				case err != nil:
					errs[i] = err
				case c.Outcome == ClaimOwned:
					ran <- struct{}{}
					time.Sleep(20 * time.Millisecond) // the backend call
					errs[i] = s.Complete(ctx, k, c.Token, []byte(envelope), idemLive)
					got[i] = envelope
				case c.Outcome == ClaimInFlight:
					var r Record
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
		s := newStore(t).store
		k := idemKey("k1")
		token := mustClaim(t, s, k, fpA, idemLive, idemLive)
		ch := waitAsync(s, t.Context(), k)
		time.Sleep(30 * time.Millisecond) // let the waiter block
		select {
		case r := <-ch:
			t.Fatalf("Wait returned %+v, %v while in flight", r.rec, r.err)
		default:
		}
		completed := time.Now()
		if err := s.Complete(t.Context(), k, token, []byte(envelope), idemLive); err != nil {
			t.Fatalf("Complete: %v", err)
		}
		r := receive(t, ch)
		if r.err != nil || r.rec.State != RecordCompleted || string(r.rec.Envelope) != envelope {
			t.Fatalf("Wait = %+v, %v; want the completed record", r.rec, r.err)
		}
		if lag := r.at.Sub(completed); lag > time.Second {
			t.Fatalf("Wait returned %v after Complete, want promptly", lag)
		}
	})

	t.Run("wait returns a record that is not in flight at once", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).store
		k := idemKey("k1")
		token := mustClaim(t, s, k, fpA, idemLive, idemLive)
		if err := s.MarkUnknown(t.Context(), k, token, []byte(envelope), idemLive); err != nil {
			t.Fatalf("MarkUnknown: %v", err)
		}
		r, err := s.Wait(t.Context(), k)
		if err != nil || r.State != RecordUnknown || string(r.Envelope) != envelope {
			t.Fatalf("Wait = %+v, %v; want the unknown record", r, err)
		}
	})

	t.Run("wait returns unknown when the lease runs out", func(t *testing.T) {
		t.Parallel()
		target := newStore(t)
		s := target.store
		k := idemKey("k1")
		token := mustClaim(t, s, k, fpA, idemShort, idemLive)
		ch := waitAsync(s, t.Context(), k)
		target.advance(idemPast)
		r := receive(t, ch)
		if r.err != nil || r.rec.State != RecordUnknown || r.rec.Fingerprint != fpA {
			t.Fatalf("Wait = %+v, %v; want unknown", r.rec, r.err)
		}
		expectLost(t, "Complete by the stale owner", s.Complete(t.Context(), k, token, []byte(envelope), idemLive))
	})

	t.Run("wait reports a released record as gone", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).store
		k := idemKey("k1")
		if _, err := s.Wait(t.Context(), k); !errors.Is(err, ErrNoRecord) {
			t.Fatalf("Wait for an absent key = %v, want ErrNoRecord", err)
		}
		token := mustClaim(t, s, k, fpA, idemLive, idemLive)
		ch := waitAsync(s, t.Context(), k)
		time.Sleep(20 * time.Millisecond)
		if err := s.Release(t.Context(), k, token); err != nil {
			t.Fatalf("Release: %v", err)
		}
		if r := receive(t, ch); !errors.Is(r.err, ErrNoRecord) {
			t.Fatalf("Wait = %+v, %v; want ErrNoRecord", r.rec, r.err)
		}
	})

	t.Run("wait honours its context", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).store
		k := idemKey("k1")
		mustClaim(t, s, k, fpA, idemLive, idemLive)

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
		s := newStore(t).store
		k := idemKey("k1")
		if _, err := s.Claim(t.Context(), k, fpA, 0, idemLive); err == nil {
			t.Fatal("Claim with a zero lease succeeded")
		}
		if _, err := s.Claim(t.Context(), k, fpA, idemLive, -time.Second); err == nil {
			t.Fatal("Claim with a negative ttl succeeded")
		}
		token := mustClaim(t, s, k, fpA, idemLive, idemLive)
		if err := s.Complete(t.Context(), k, token, []byte(envelope), 0); err == nil || errors.Is(err, ErrLostClaim) {
			t.Fatalf("Complete with a zero ttl = %v, want a usage error", err)
		}
	})

	t.Run("a store answers ping until closed", func(t *testing.T) {
		t.Parallel()
		s := newStore(t).store
		if err := s.Ping(t.Context()); err != nil {
			t.Fatalf("Ping: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := s.Ping(t.Context()); err == nil {
			t.Fatal("Ping after Close succeeded")
		}
		if _, err := s.Claim(t.Context(), idemKey("k1"), fpA, idemLive, idemLive); err == nil {
			t.Fatal("Claim after Close succeeded")
		}
	})
}

func TestRecordMatches(t *testing.T) {
	a := Fingerprint{1}
	b := Fingerprint{2}
	for _, tc := range []struct {
		name   string
		record Fingerprint
		call   Fingerprint
		want   bool
	}{
		{"the same fingerprint matches", a, a, true},
		{"another fingerprint does not match", a, b, false},
		{"an unreadable record matches every call", Fingerprint{}, b, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := (Record{Fingerprint: tc.record}).Matches(tc.call); got != tc.want {
				t.Fatalf("Matches = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNewFingerprint(t *testing.T) {
	base := idemFingerprint(t, `{"user_id":"u1","text":"hi","tags":["a","b"]}`)
	if got := idemFingerprint(t, `{ "tags":["a","b"], "text":"hi", "user_id":"u1" }`); got != base {
		t.Error("key order or white space changed the fingerprint")
	}
	for _, other := range []string{
		`{"user_id":"u1","text":"hi","tags":["b","a"]}`,
		`{"user_id":"u1","text":"hi!","tags":["a","b"]}`,
		`{"user_id":"u1","text":"hi"}`,
	} {
		if idemFingerprint(t, other) == base {
			t.Errorf("%s has the same fingerprint as the base arguments", other)
		}
	}
	one, _ := NewFingerprint("t", map[string]any{"n": json.Number("1")})
	onePointZero, _ := NewFingerprint("t", map[string]any{"n": json.Number("1.0")})
	if one == onePointZero {
		t.Error("1 and 1.0 share a fingerprint; numbers are meant to be verbatim")
	}
	a, _ := NewFingerprint("send_notification", map[string]any{})
	b, _ := NewFingerprint("send_email", map[string]any{})
	if a == b {
		t.Error("two tools with the same arguments share a fingerprint")
	}
	if _, err := NewFingerprint("t", math.NaN()); err == nil {
		t.Error("NewFingerprint(NaN) succeeded")
	}
	if s := base.String(); len(s) != 64 || strings.ToLower(s) != s {
		t.Errorf("String() = %q, want 64 lower-case hex digits", s)
	}
}
