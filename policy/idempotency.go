package policy

// Idempotency records: what a side-effecting tool call claimed, and what came
// of it.
//
// A side-effecting call first claims its idempotency key. The claim is an
// in-flight record carrying a random owner token and a lease; only the token
// holder may finish it (Complete, MarkUnknown) or withdraw it (Release). The
// guarantees, for both stores:
//
//   - At most one caller owns a key at a time: Claim is atomic, and in-flight
//     records are never evicted by a size bound.
//   - A lease that ran out is never re-run. Its owner died or hung mid-call,
//     so the effect may have happened; the first observer (Claim, Reclaim, Get
//     or Wait) turns the record into RecordUnknown, atomically, and the old
//     token is refused from then on. Until someone observes the expiry, the
//     owner may still finish: nobody has acted on the expiry yet, and a real
//     result beats an unknown one.
//   - Completed and unknown records are kept for the ttl given when they were
//     written, then are treated as absent. The memory store may drop them
//     earlier when it runs out of room, fairly between callers (see
//     MemoryStore; MemoryOptions.OnEvict reports it).
//   - Every operation may be repeated with the same token and gives the first
//     run's result: a Claim finds the record its own first run created (the
//     Redis store draws the token before the first try), a Complete or
//     MarkUnknown by the token that already finished the record in that state
//     succeeds, and a Release of a key the token no longer holds succeeds.
//     A client that retries a command whose reply was lost therefore neither
//     waits for itself nor reports a lost claim that was not (see redisstate.Store
//     for how the Redis store does it, and for claims whose reply never came).
//
// What is not guaranteed: a store that loses its data (a Redis restart without
// persistence, a process restart with the memory store) forgets every key, so
// a retry after that runs again; a Redis that evicts keys (any maxmemory-policy
// but noeviction) may drop an in-flight record, which lets a second call run.
// Errors from the store are returned as they are; the pipeline fails closed on
// them.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/toolgate/toolgate/internal/jsontape"
)

// ErrLostClaim means the token no longer owns the record: the record was
// finished, released, taken over after its lease ran out, or it expired.
var ErrLostClaim = errors.New("idempotency claim lost")

// ErrNoRecord is returned by Wait when there is no record for the key, or the
// record disappeared while waiting (its owner released it, or it expired).
// The waiter should claim the key itself.
var ErrNoRecord = errors.New("no idempotency record")

// ErrStoreClosed is returned by every operation on a closed store.
var ErrStoreClosed = errors.New("idempotency store closed")

// IdempotencyKey scopes a key: a key is only ever compared within one
// caller, one tool and one forwarded identity.
type IdempotencyKey struct {
	Caller string
	Tool   string
	Key    string
	// Scope is the forwarded identity of the call (IdentityScope): a keyed
	// hash, never a header's value; empty when the call forwards none.
	Scope string
}

// Fingerprint identifies a call's arguments: SHA-256 over the tool name, a
// zero byte and the canonical JSON of the arguments (sorted keys, numbers
// as sent: see jsontape.AppendCanonical).
type Fingerprint [32]byte

// NewFingerprint returns the fingerprint of a call of tool with args.
func NewFingerprint(tool string, args any) (Fingerprint, error) {
	buf := make([]byte, 0, len(tool)+1+256)
	buf = append(buf, tool...)
	buf = append(buf, 0)
	buf, err := jsontape.AppendCanonical(buf, args)
	if err != nil {
		return Fingerprint{}, err
	}
	return sha256.Sum256(buf), nil
}

// String returns the fingerprint in lower-case hex.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// IsZero reports whether f is the zero fingerprint, the one a store reports
// when it could not read a record.
func (f Fingerprint) IsZero() bool { return f == Fingerprint{} }

// RecordState is the state of an idempotency record.
type RecordState uint8

// The record states. The zero value is not a valid state.
const (
	// RecordInFlight: the owner is running the call.
	RecordInFlight RecordState = iota + 1
	// RecordCompleted: the call finished; Envelope holds its result.
	RecordCompleted
	// RecordUnknown: the request may have reached the backend and the outcome
	// is lost. Envelope holds the envelope the owner stored with MarkUnknown,
	// or is empty when the store itself declared the outcome unknown (a lease
	// that ran out, a record it could not decode).
	RecordUnknown
)

// String returns the state's name.
func (s RecordState) String() string {
	return enumName("RecordState", uint8(s), "in_flight", "completed", "unknown")
}

// enumName names the value v of an enum whose values start at 1.
func enumName(typ string, v uint8, names ...string) string {
	if v >= 1 && int(v) <= len(names) {
		return names[v-1]
	}
	return typ + "(" + strconv.Itoa(int(v)) + ")"
}

// Record is an idempotency record as a store returns it. Stores hand out
// copies: the caller may keep and modify it.
type Record struct {
	State RecordState
	// Fingerprint of the arguments of the call that claimed the key. It is
	// zero when the store could not decode the record (see Matches).
	Fingerprint Fingerprint
	// Envelope is the stored envelope JSON of a completed or unknown record,
	// opaque to the store. Empty while in flight, and for an unknown record
	// the store declared itself.
	Envelope []byte
	// Token is the owner token while in flight; empty otherwise.
	Token string
	// UpdatedAt is when the record was last written (the Redis server's clock
	// for the Redis store).
	UpdatedAt time.Time
	// LeaseUntil is when the owner's lease runs out, while in flight.
	LeaseUntil time.Time
}

// Matches reports whether a call with fingerprint fp may share this record.
// A record whose fingerprint the store could not read matches every call: it
// is reported as unknown, and an unknown outcome must be kept rather than
// turned into "key reused with other arguments", which would invite a new key
// and a second effect.
func (r Record) Matches(fp Fingerprint) bool {
	return r.Fingerprint == fp || r.Fingerprint.IsZero()
}

// ClaimOutcome says what a Claim or Reclaim found.
type ClaimOutcome uint8

// The claim outcomes. The zero value is not a valid outcome.
const (
	// ClaimOwned: the caller owns a fresh in-flight record and runs the call.
	ClaimOwned ClaimOutcome = iota + 1
	// ClaimInFlight: another call holds the key; wait for it.
	ClaimInFlight
	// ClaimCompleted: the call already ran; replay Record.Envelope.
	ClaimCompleted
	// ClaimUnknown: an earlier call's outcome is unknown; do not resend unless
	// the backend dedupes on a forwarded key (then Reclaim).
	ClaimUnknown
)

// String returns the outcome's name.
func (o ClaimOutcome) String() string {
	return enumName("ClaimOutcome", uint8(o), "owned", "in_flight", "completed", "unknown")
}

// Claim is the result of IdempotencyStore.Claim and Reclaim.
type Claim struct {
	Outcome ClaimOutcome
	// Token is the owner token when Outcome is ClaimOwned.
	Token string
	// Record is the record found (or, with ClaimOwned, the one created).
	Record Record
}

// ClaimFor returns the claim outcome that reports an existing record.
func ClaimFor(r Record) Claim {
	switch r.State {
	case RecordInFlight:
		return Claim{Outcome: ClaimInFlight, Record: r}
	case RecordCompleted:
		return Claim{Outcome: ClaimCompleted, Record: r}
	}
	return Claim{Outcome: ClaimUnknown, Record: r}
}

// IdempotencyStore keeps idempotency records. Implementations are safe for
// concurrent use and pass the same conformance suite (store_test.go).
//
// Durations: lease bounds how long an owner may hold a key in flight; ttl is
// how long a record is kept once it is no longer in flight. Both must be
// positive; the Redis store rounds them up to whole milliseconds.
type IdempotencyStore interface {
	// Claim atomically creates an in-flight record with a fresh random owner
	// token unless a record exists, in which case it reports that record. An
	// in-flight record whose lease ran out is not re-run: its owner died
	// mid-call and the effect may have happened, so Claim turns it into an
	// unknown record (kept for the ttl given when it was claimed) and reports
	// ClaimUnknown. ttl is the retention of the record once it leaves flight
	// this way; Complete and MarkUnknown set their own.
	Claim(ctx context.Context, k IdempotencyKey, fp Fingerprint, lease, ttl time.Duration) (Claim, error)
	// Reclaim takes over an unknown record with fingerprint fp (or one whose
	// lease ran out, or an undecodable one), only used when the backend
	// dedupes on a forwarded key: it becomes in flight with a new token,
	// atomically, and the old token is refused. A missing record is claimed
	// as Claim would. Any other record (completed, in flight, unknown with
	// another fingerprint) is reported as Claim reports it.
	Reclaim(ctx context.Context, k IdempotencyKey, fp Fingerprint, lease, ttl time.Duration) (Claim, error)
	// Complete stores the final envelope. It succeeds only for the current
	// owner token, else ErrLostClaim; the record is then kept for ttl. A
	// repeat by the token that completed the record succeeds and changes
	// nothing.
	Complete(ctx context.Context, k IdempotencyKey, token string, envelope []byte, ttl time.Duration) error
	// MarkUnknown stores an envelope whose outcome is unknown, under the same
	// rules as Complete.
	MarkUnknown(ctx context.Context, k IdempotencyKey, token string, envelope []byte, ttl time.Duration) error
	// Release deletes an in-flight record its owner decided not to run after
	// all (rejected before sending: open circuit, rate limit). It succeeds
	// for the current owner token, and when nothing is held any more (the
	// token released it already, or the record is gone); ErrLostClaim when
	// another token holds the key, or the record was finished or declared
	// unknown, or token is empty.
	Release(ctx context.Context, k IdempotencyKey, token string) error
	// Get returns the record for k, if any. An in-flight record whose lease
	// ran out is converted and reported as unknown, as Claim does.
	Get(ctx context.Context, k IdempotencyKey) (Record, bool, error)
	// Wait blocks until the record is no longer in flight and returns it;
	// a lease that runs out meanwhile is converted and returned as unknown.
	// It returns ErrNoRecord when there is no record or it disappears
	// (released, expired), and ctx.Err() when ctx ends first.
	Wait(ctx context.Context, k IdempotencyKey) (Record, error)
	// Ping reports whether the store answers and accepts writes.
	Ping(ctx context.Context) error
	// ScopeKey returns the key identity scopes are hashed with
	// (IdentityScope) when the policy sets none: the same for every
	// process that shares the store, at least MinScopeKeyLen bytes, and
	// the same on every call while the store keeps its records.
	ScopeKey(ctx context.Context) ([]byte, error)
	// Close releases the store's resources; later calls return
	// ErrStoreClosed (memory) or the client's error (Redis).
	Close() error
}

// CheckDurations rejects lease and ttl values no store can honour.
func CheckDurations(lease, ttl time.Duration) error {
	if lease <= 0 {
		return fmt.Errorf("idempotency lease %v must be positive", lease)
	}
	return CheckTTL(ttl)
}

// CheckTTL rejects a retention no store can honour.
func CheckTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("idempotency ttl %v must be positive", ttl)
	}
	return nil
}
