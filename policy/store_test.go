package policy

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// The conformance suite of every IdempotencyStore is
// internal/testkit/statetest's; conformance_test.go runs it against the
// memory store. These are the helpers the memory store's own tests use.

// TestMain checks that no test of the package leaves a goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// idemLive is a lease or ttl that never runs out during a test.
const idemLive = time.Minute

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
