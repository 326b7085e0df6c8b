package policy

import (
	"bytes"
	"context"
	"crypto/rand"
	"sync"
	"time"
)

// DefaultMaxKeys is the memory store's bound on completed and unknown records
// when MemoryOptions.MaxKeys is not set.
const DefaultMaxKeys = 100_000

// DefaultMaxBytes is the memory store's bound on the bytes of completed and
// unknown records when MemoryOptions.MaxBytes is not set: 64 MiB.
const DefaultMaxBytes = 64 << 20

// MemoryOptions configures a MemoryStore. The zero value is usable.
type MemoryOptions struct {
	// MaxKeys bounds the completed and unknown records kept, all callers
	// together. In-flight records do not count and are never evicted (their
	// number is bounded by the calls running). Zero or less means
	// DefaultMaxKeys.
	MaxKeys int
	// MaxBytes bounds the bytes those records take, as RecordSize counts
	// them. Zero or less means DefaultMaxBytes.
	MaxBytes int64
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// OnEvict, if set, is called with the key of a completed or unknown
	// record evicted by the bounds before its ttl ran out. It runs after the
	// store's lock is released, on the goroutine whose call caused the
	// eviction, and may call the store.
	OnEvict func(k IdempotencyKey)
}

// MemoryStore is an IdempotencyStore for a single replica, kept in process
// memory. Completed and unknown records expire by their own ttl, checked
// against the injected clock whenever they are read. In-flight records live
// in a separate map that no bound reaches.
//
// Completed and unknown records are bounded in number (MaxKeys) and in bytes
// (MaxBytes), and the room is shared fairly between callers: each caller's
// records form a partition, an LRU of its own, and each of the n callers
// holding records has a fair share of 1/n of either bound. When a new record
// takes the store past a bound, the least recently used record of the
// partition that holds the most (keys for the key bound, bytes for the byte
// bound) is evicted, until both bounds hold again. That partition is always
// over its share (it holds more than the average, and the average is over
// the share when the store is over its bound), so a caller within its share
// never loses a record to another caller's traffic: one caller flooding the
// store only evicts its own records. A record bigger than MaxBytes on its
// own is evicted at once (and reported), so the store never holds more than
// its bounds after a write.
//
// A stored envelope is the envelope the caller received: its data is the
// backend's body (at most server.max_response_bytes) as the contract shapes
// it, and its message and observation are bounded in characters
// (observation_max_chars). RecordSize counts it with the key strings and a
// fixed overhead.
//
// Lease expiry is observed, not scheduled: Claim, Reclaim, Get and Wait
// compare the lease with the clock. A waiter sleeps on a channel closed when
// the record leaves flight, on its context, and on a timer set to the lease
// remaining by the clock, after which it looks again; with a clock that tests
// move by hand, a waiter therefore notices a lease that ran out at most one
// lease of real time later. The store starts no goroutines.
type MemoryStore struct {
	maxKeys  int
	maxBytes int64
	now      func() time.Time
	onEvict  func(IdempotencyKey)
	scopeKey []byte // drawn once: the records live no longer than the store

	mu       sync.Mutex
	done     memPartitions // completed and unknown records
	inFlight map[IdempotencyKey]*memFlight
	evicted  []IdempotencyKey // evicted while mu is held; reported by unlock
	closed   bool
}

// memRecord is a completed or unknown record.
type memRecord struct {
	rec Record
	// token finished the record (empty when the store declared the outcome
	// unknown itself): a repeated Complete or MarkUnknown by it succeeds.
	token   string
	expires time.Time
	size    int64
}

// memFlight is an in-flight record. Like the Redis key, it disappears ttl
// after its lease ran out if nobody observed the expiry.
type memFlight struct {
	rec  Record
	ttl  time.Duration
	left chan struct{} // closed when the record leaves flight
}

// sweepPerClaim is how many in-flight records each Claim inspects, so that
// records abandoned by a buggy owner do not accumulate when nobody reads them.
const sweepPerClaim = 2

var _ IdempotencyStore = (*MemoryStore)(nil)

// NewMemoryStore returns an empty memory store.
func NewMemoryStore(opts MemoryOptions) *MemoryStore {
	if opts.MaxKeys <= 0 {
		opts.MaxKeys = DefaultMaxKeys
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &MemoryStore{
		maxKeys:  opts.MaxKeys,
		maxBytes: opts.MaxBytes,
		now:      opts.Now,
		onEvict:  opts.OnEvict,
		scopeKey: []byte(NewScopeKey()),
		done:     newMemPartitions(),
		inFlight: make(map[IdempotencyKey]*memFlight),
	}
}

// ScopeKey implements IdempotencyStore: a random key drawn when the store
// was made. No other process shares the store's records, so no other
// process needs the key.
func (s *MemoryStore) ScopeKey(context.Context) ([]byte, error) {
	return s.scopeKey, nil
}

// Claim implements IdempotencyStore.
func (s *MemoryStore) Claim(_ context.Context, k IdempotencyKey, fp Fingerprint, lease, ttl time.Duration) (Claim, error) {
	if err := s.lockClaim(lease, ttl); err != nil {
		return Claim{}, err
	}
	defer s.unlock()
	now := s.now()
	s.sweepLocked(now)
	if r, _, ok := s.lookupLocked(k, now); ok {
		return ClaimFor(cloneRecord(r)), nil
	}
	return s.newFlightLocked(k, fp, lease, ttl, now), nil
}

// Reclaim implements IdempotencyStore.
func (s *MemoryStore) Reclaim(_ context.Context, k IdempotencyKey, fp Fingerprint, lease, ttl time.Duration) (Claim, error) {
	if err := s.lockClaim(lease, ttl); err != nil {
		return Claim{}, err
	}
	defer s.unlock()
	now := s.now()
	// lookupLocked has already turned a lease that ran out into unknown.
	r, f, ok := s.lookupLocked(k, now)
	switch {
	case !ok:
		return s.newFlightLocked(k, fp, lease, ttl, now), nil
	case f == nil && r.State == RecordUnknown && r.Fingerprint == fp:
		s.done.remove(k)
		return s.newFlightLocked(k, fp, lease, ttl, now), nil
	}
	return ClaimFor(cloneRecord(r)), nil
}

// Complete implements IdempotencyStore.
func (s *MemoryStore) Complete(_ context.Context, k IdempotencyKey, token string, envelope []byte, ttl time.Duration) error {
	return s.finish(k, token, RecordCompleted, envelope, ttl)
}

// MarkUnknown implements IdempotencyStore.
func (s *MemoryStore) MarkUnknown(_ context.Context, k IdempotencyKey, token string, envelope []byte, ttl time.Duration) error {
	return s.finish(k, token, RecordUnknown, envelope, ttl)
}

func (s *MemoryStore) finish(k IdempotencyKey, token string, state RecordState, envelope []byte, ttl time.Duration) error {
	if err := CheckTTL(ttl); err != nil {
		return err
	}
	if err := s.lock(); err != nil {
		return err
	}
	defer s.unlock()
	now := s.now()
	f, err := s.ownedLocked(k, token, now)
	if err != nil {
		if m, ok := s.done.peek(k); ok && token != "" && m.token == token && m.rec.State == state && now.Before(m.expires) {
			return nil // finished by this token already: a repeat changes nothing
		}
		return err
	}
	var stored []byte
	if len(envelope) > 0 {
		stored = bytes.Clone(envelope)
	}
	s.settleLocked(k, f, state, token, stored, ttl, now)
	return nil
}

// Release implements IdempotencyStore.
func (s *MemoryStore) Release(_ context.Context, k IdempotencyKey, token string) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.unlock()
	now := s.now()
	if _, err := s.ownedLocked(k, token, now); err == nil {
		s.dropFlightLocked(k, s.inFlight[k])
		return nil
	}
	if _, inFlight := s.inFlight[k]; inFlight || token == "" {
		return ErrLostClaim
	}
	if m, ok := s.done.peek(k); ok && now.Before(m.expires) {
		return ErrLostClaim // finished: there is nothing to withdraw
	}
	return nil // nothing is held: released before, or gone
}

// Get implements IdempotencyStore.
func (s *MemoryStore) Get(_ context.Context, k IdempotencyKey) (Record, bool, error) {
	if err := s.lock(); err != nil {
		return Record{}, false, err
	}
	defer s.unlock()
	r, _, ok := s.lookupLocked(k, s.now())
	if !ok {
		return Record{}, false, nil
	}
	return cloneRecord(r), true, nil
}

// Wait implements IdempotencyStore.
func (s *MemoryStore) Wait(ctx context.Context, k IdempotencyKey) (Record, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if err := s.lock(); err != nil {
			return Record{}, err
		}
		now := s.now()
		r, f, ok := s.lookupLocked(k, now)
		var left <-chan struct{}
		var lease time.Duration
		if f != nil {
			left, lease = f.left, f.rec.LeaseUntil.Sub(now)
		}
		s.unlock()
		switch {
		case !ok:
			return Record{}, ErrNoRecord
		case f == nil:
			return cloneRecord(r), nil
		}
		if timer == nil {
			timer = time.NewTimer(lease)
		} else {
			timer.Reset(lease)
		}
		select {
		case <-left:
		case <-timer.C:
		case <-ctx.Done():
			return Record{}, ctx.Err()
		}
	}
}

// Ping implements IdempotencyStore: a memory store answers until closed.
func (s *MemoryStore) Ping(context.Context) error {
	if err := s.lock(); err != nil {
		return err
	}
	s.unlock()
	return nil
}

// Close drops every record and wakes every waiter; later calls return
// ErrStoreClosed.
func (s *MemoryStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	for k, f := range s.inFlight {
		s.dropFlightLocked(k, f)
	}
	s.done = newMemPartitions()
	return nil
}

// lock takes the store's lock unless the store is closed.
func (s *MemoryStore) lock() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrStoreClosed
	}
	return nil
}

// lockClaim checks a claim's durations and takes the lock, as lock does.
func (s *MemoryStore) lockClaim(lease, ttl time.Duration) error {
	if err := CheckDurations(lease, ttl); err != nil {
		return err
	}
	return s.lock()
}

// unlock releases the lock, then reports the evictions the critical section
// caused, so that OnEvict never runs under the lock.
func (s *MemoryStore) unlock() {
	evicted := s.evicted
	s.evicted = nil
	s.mu.Unlock()
	if s.onEvict != nil {
		for _, k := range evicted {
			s.onEvict(k)
		}
	}
}

// lookupLocked returns the live record for k and, while it is in flight, its
// flight. Expired records are removed; an in-flight record whose lease ran out
// is turned into an unknown record first.
func (s *MemoryStore) lookupLocked(k IdempotencyKey, now time.Time) (Record, *memFlight, bool) {
	if f, ok := s.inFlight[k]; ok {
		switch {
		case !now.Before(f.rec.LeaseUntil.Add(f.ttl)):
			s.dropFlightLocked(k, f)
		case !now.Before(f.rec.LeaseUntil):
			return s.settleLocked(k, f, RecordUnknown, "", nil, f.ttl, now), nil, true
		default:
			return f.rec, f, true
		}
	}
	if m, ok := s.done.get(k); ok {
		if now.Before(m.expires) {
			return m.rec, nil, true
		}
		s.done.remove(k)
	}
	return Record{}, nil, false
}

// ownedLocked returns k's flight if token owns it.
func (s *MemoryStore) ownedLocked(k IdempotencyKey, token string, now time.Time) (*memFlight, error) {
	f, ok := s.inFlight[k]
	if !ok || f.rec.Token != token {
		return nil, ErrLostClaim
	}
	if !now.Before(f.rec.LeaseUntil.Add(f.ttl)) {
		// Gone ttl after its lease, as the Redis key would be.
		s.dropFlightLocked(k, f)
		return nil, ErrLostClaim
	}
	return f, nil
}

func (s *MemoryStore) newFlightLocked(k IdempotencyKey, fp Fingerprint, lease, ttl time.Duration, now time.Time) Claim {
	token := rand.Text()
	f := &memFlight{
		rec: Record{
			State:       RecordInFlight,
			Fingerprint: fp,
			Token:       token,
			UpdatedAt:   now,
			LeaseUntil:  now.Add(lease),
		},
		ttl:  ttl,
		left: make(chan struct{}),
	}
	s.inFlight[k] = f
	return Claim{Outcome: ClaimOwned, Token: token, Record: f.rec}
}

// settleLocked moves a record out of flight into its caller's partition,
// then evicts what the bounds require.
func (s *MemoryStore) settleLocked(k IdempotencyKey, f *memFlight, state RecordState, token string, envelope []byte, ttl time.Duration, now time.Time) Record {
	s.dropFlightLocked(k, f)
	m := &memRecord{
		rec: Record{
			State:       state,
			Fingerprint: f.rec.Fingerprint,
			Envelope:    envelope,
			UpdatedAt:   now,
		},
		token:   token,
		expires: now.Add(ttl),
		size:    RecordSize(k, envelope),
	}
	s.done.add(k, m)
	for s.done.keys > s.maxKeys || s.done.bytes > s.maxBytes {
		old, oldest := s.done.evict(s.done.keys > s.maxKeys)
		if now.Before(oldest.expires) {
			s.evicted = append(s.evicted, old)
		}
	}
	return m.rec
}

func (s *MemoryStore) dropFlightLocked(k IdempotencyKey, f *memFlight) {
	delete(s.inFlight, k)
	close(f.left)
}

// sweepLocked drops a few in-flight records that have been gone for good
// (ttl after their lease) without anyone looking; Go's map iteration starts
// at a random entry.
func (s *MemoryStore) sweepLocked(now time.Time) {
	n := 0
	for k, f := range s.inFlight {
		if n == sweepPerClaim {
			return
		}
		n++
		if !now.Before(f.rec.LeaseUntil.Add(f.ttl)) {
			s.dropFlightLocked(k, f)
		}
	}
}

// cloneRecord returns r with its own copy of the envelope.
func cloneRecord(r Record) Record {
	if r.Envelope != nil {
		r.Envelope = bytes.Clone(r.Envelope)
	}
	return r
}
