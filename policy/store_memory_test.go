package policy

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// storeClock is a clock tests move by hand.
type storeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newStoreClock() *storeClock {
	return &storeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *storeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *storeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// evictionLog records OnEvict calls.
type evictionLog struct {
	mu   sync.Mutex
	keys []string
}

func (l *evictionLog) add(k IdempotencyKey) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys = append(l.keys, k.Key)
}

func (l *evictionLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.keys)
}

// completeKey claims and completes k in s.
func completeKey(t testing.TB, s IdempotencyStore, k IdempotencyKey, ttl time.Duration) {
	t.Helper()
	c, err := s.Claim(t.Context(), k, Fingerprint{1}, time.Minute, ttl)
	if err != nil || c.Outcome != ClaimOwned {
		t.Fatalf("Claim(%q) = %v, %v; want owned", k.Key, c.Outcome, err)
	}
	if err := s.Complete(t.Context(), k, c.Token, []byte(`{"status":"ok"}`), ttl); err != nil {
		t.Fatalf("Complete(%q): %v", k.Key, err)
	}
}

func present(t *testing.T, s IdempotencyStore, keys ...string) []string {
	t.Helper()
	var got []string
	for _, key := range keys {
		_, ok, err := s.Get(t.Context(), idemKey(key))
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got = append(got, key)
		}
	}
	return got
}

func TestMemoryStoreEviction(t *testing.T) {
	t.Run("completed records beyond MaxKeys are evicted least recently used first and reported", func(t *testing.T) {
		var log evictionLog
		s := NewMemoryStore(MemoryOptions{MaxKeys: 3, OnEvict: log.add})
		defer s.Close()
		for _, key := range []string{"k1", "k2", "k3"} {
			completeKey(t, s, idemKey(key), time.Hour)
		}
		// A replay makes k1 the most recently used.
		if c, _ := s.Claim(t.Context(), idemKey("k1"), Fingerprint{1}, time.Minute, time.Hour); c.Outcome != ClaimCompleted {
			t.Fatalf("replay of k1 = %v", c.Outcome)
		}
		completeKey(t, s, idemKey("k4"), time.Hour)
		completeKey(t, s, idemKey("k5"), time.Hour)
		if got, want := log.get(), []string{"k2", "k3"}; !slices.Equal(got, want) {
			t.Fatalf("OnEvict got %v, want %v", got, want)
		}
		if got, want := present(t, s, "k1", "k2", "k3", "k4", "k5"), []string{"k1", "k4", "k5"}; !slices.Equal(got, want) {
			t.Fatalf("present: %v, want %v", got, want)
		}
	})

	t.Run("an expired record makes room without being reported", func(t *testing.T) {
		var log evictionLog
		clock := newStoreClock()
		s := NewMemoryStore(MemoryOptions{MaxKeys: 2, Now: clock.Now, OnEvict: log.add})
		defer s.Close()
		completeKey(t, s, idemKey("short"), time.Second)
		completeKey(t, s, idemKey("long"), time.Hour)
		clock.Advance(time.Minute)
		completeKey(t, s, idemKey("new"), time.Hour)
		if got := log.get(); len(got) != 0 {
			t.Fatalf("OnEvict got %v for an expired record", got)
		}
	})

	t.Run("in-flight records are never evicted", func(t *testing.T) {
		var log evictionLog
		s := NewMemoryStore(MemoryOptions{MaxKeys: 3, OnEvict: log.add})
		defer s.Close()
		tokens := make(map[string]string)
		for i := range 10 {
			key := "k" + strconv.Itoa(i)
			tokens[key] = mustClaim(t, s, idemKey(key), Fingerprint{1}, time.Minute, time.Hour)
		}
		completeKey(t, s, idemKey("done1"), time.Hour)
		completeKey(t, s, idemKey("done2"), time.Hour)
		completeKey(t, s, idemKey("done3"), time.Hour)
		completeKey(t, s, idemKey("done4"), time.Hour)
		for key := range tokens {
			expectClaim(t, s, idemKey(key), Fingerprint{1}, ClaimInFlight, "")
		}
		for key, token := range tokens {
			if err := s.Complete(t.Context(), idemKey(key), token, []byte(`{}`), time.Hour); err != nil {
				t.Fatalf("Complete(%s): %v", key, err)
			}
		}
		if n := len(log.get()); n != 11 {
			t.Fatalf("%d records evicted, want 11 (14 completed, room for 3)", n)
		}
	})

	t.Run("OnEvict may call the store", func(t *testing.T) {
		var s *MemoryStore
		var seen []bool
		s = NewMemoryStore(MemoryOptions{MaxKeys: 1, OnEvict: func(k IdempotencyKey) {
			_, ok, _ := s.Get(t.Context(), k)
			seen = append(seen, ok)
		}})
		defer s.Close()
		completeKey(t, s, idemKey("k1"), time.Hour)
		completeKey(t, s, idemKey("k2"), time.Hour)
		if !slices.Equal(seen, []bool{false}) {
			t.Fatalf("OnEvict saw %v, want one call with the record gone", seen)
		}
	})

	t.Run("zero bounds mean the defaults", func(t *testing.T) {
		s := NewMemoryStore(MemoryOptions{})
		defer s.Close()
		if s.maxKeys != DefaultMaxKeys || s.maxBytes != DefaultMaxBytes {
			t.Fatalf("bounds = %d keys, %d bytes; want %d, %d", s.maxKeys, s.maxBytes, DefaultMaxKeys, DefaultMaxBytes)
		}
	})
}

// callerKey is a key of another caller than idemKey's.
func callerKey(caller, key string) IdempotencyKey {
	return IdempotencyKey{Caller: caller, Tool: "send_notification", Key: key}
}

// completeWith claims and completes k with envelope.
func completeWith(t testing.TB, s *MemoryStore, k IdempotencyKey, envelope []byte) {
	t.Helper()
	c, err := s.Claim(t.Context(), k, Fingerprint{1}, time.Minute, time.Hour)
	if err != nil || c.Outcome != ClaimOwned {
		t.Fatalf("Claim(%v) = %v, %v; want owned", k, c.Outcome, err)
	}
	if err := s.Complete(t.Context(), k, c.Token, envelope, time.Hour); err != nil {
		t.Fatalf("Complete(%v): %v", k, err)
	}
}

func has(t *testing.T, s *MemoryStore, k IdempotencyKey) bool {
	t.Helper()
	_, ok, err := s.Get(t.Context(), k)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestMemoryStoreSharesRoomFairly(t *testing.T) {
	small := []byte(`{"status":"ok"}`)

	t.Run("one caller flooding keys cannot evict another caller's completed record", func(t *testing.T) {
		var log evictionLog
		s := NewMemoryStore(MemoryOptions{MaxKeys: 100, OnEvict: log.add})
		defer s.Close()
		victim := []IdempotencyKey{callerKey("payments-agent", "pay-1"), callerKey("payments-agent", "pay-2"), callerKey("research-agent", "r-1")}
		for _, k := range victim {
			completeWith(t, s, k, small)
		}
		for i := range 5000 {
			completeWith(t, s, callerKey("flooder", "f-"+strconv.Itoa(i)), small)
		}
		for _, k := range victim {
			if !has(t, s, k) {
				t.Fatalf("%v was evicted by another caller's flood", k)
			}
		}
		if got, want := len(log.get()), 5000-97; got != want {
			t.Fatalf("%d records evicted, want %d (the flooder's oldest only)", got, want)
		}
		if !has(t, s, callerKey("flooder", "f-4999")) || has(t, s, callerKey("flooder", "f-0")) {
			t.Fatal("the flooder's newest record is gone or its oldest kept")
		}
	})

	t.Run("one caller flooding bytes cannot evict another caller's records", func(t *testing.T) {
		big := bytes.Repeat([]byte("x"), 64<<10)
		s := NewMemoryStore(MemoryOptions{MaxBytes: 1 << 20})
		defer s.Close()
		victim := callerKey("payments-agent", "pay-1")
		completeWith(t, s, victim, big)
		for i := range 200 {
			completeWith(t, s, callerKey("flooder", "f-"+strconv.Itoa(i)), big)
		}
		if !has(t, s, victim) {
			t.Fatal("a caller within its share lost its record to a flood of large records")
		}
		if s.done.bytes > s.maxBytes {
			t.Fatalf("the store holds %d bytes, bound %d", s.done.bytes, s.maxBytes)
		}
	})

	t.Run("the caller holding the most gives up its least recently used record", func(t *testing.T) {
		s := NewMemoryStore(MemoryOptions{MaxKeys: 10})
		defer s.Close()
		for i := range 6 {
			completeWith(t, s, callerKey("a", strconv.Itoa(i)), small)
		}
		for i := range 4 {
			completeWith(t, s, callerKey("b", strconv.Itoa(i)), small)
		}
		// A replay makes a's first record its most recently used.
		if c, _ := s.Claim(t.Context(), callerKey("a", "0"), Fingerprint{1}, time.Minute, time.Hour); c.Outcome != ClaimCompleted {
			t.Fatalf("replay = %v", c.Outcome)
		}
		completeWith(t, s, callerKey("c", "0"), small)
		completeWith(t, s, callerKey("c", "1"), small)
		for _, tc := range []struct {
			k    IdempotencyKey
			kept bool
		}{
			{callerKey("a", "0"), true}, {callerKey("a", "1"), false}, {callerKey("a", "2"), false}, {callerKey("a", "3"), true},
			{callerKey("b", "0"), true}, {callerKey("c", "0"), true}, {callerKey("c", "1"), true},
		} {
			if got := has(t, s, tc.k); got != tc.kept {
				t.Errorf("%v kept = %v, want %v", tc.k, got, tc.kept)
			}
		}
	})

	t.Run("a record bigger than the whole store is evicted at once and reported", func(t *testing.T) {
		var log evictionLog
		s := NewMemoryStore(MemoryOptions{MaxBytes: 4096, OnEvict: log.add})
		defer s.Close()
		completeWith(t, s, callerKey("a", "small"), small)
		completeWith(t, s, callerKey("b", "huge"), bytes.Repeat([]byte("x"), 8192))
		if got := log.get(); !slices.Equal(got, []string{"huge"}) {
			t.Fatalf("evicted %v, want the huge record only", got)
		}
		if !has(t, s, callerKey("a", "small")) || s.done.bytes > s.maxBytes {
			t.Fatalf("the small record is gone, or the store holds %d bytes", s.done.bytes)
		}
	})

	t.Run("in-flight records of a flooded store are never evicted", func(t *testing.T) {
		s := NewMemoryStore(MemoryOptions{MaxKeys: 5, MaxBytes: 8192})
		defer s.Close()
		token := mustClaim(t, s, callerKey("a", "running"), Fingerprint{1}, time.Minute, time.Hour)
		for i := range 100 {
			completeWith(t, s, callerKey("a", strconv.Itoa(i)), bytes.Repeat([]byte("x"), 1024))
		}
		if err := s.Complete(t.Context(), callerKey("a", "running"), token, small, time.Hour); err != nil {
			t.Fatalf("Complete of the in-flight record: %v", err)
		}
	})
}

// TestMemoryStoreAccounting checks the partitions' totals and heaps against
// a plain count after a random mix of writes, replays, reclaims and
// evictions over many callers.
func TestMemoryStoreAccounting(t *testing.T) {
	clock := newStoreClock()
	s := NewMemoryStore(MemoryOptions{MaxKeys: 300, MaxBytes: 200 << 10, Now: clock.Now})
	defer s.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		caller := "caller-" + strconv.Itoa(int(rng.ExpFloat64()*4))
		k := callerKey(caller, strconv.Itoa(rng.IntN(400)))
		c, err := s.Claim(t.Context(), k, Fingerprint{1}, time.Minute, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case c.Outcome == ClaimOwned && rng.IntN(10) == 0:
			if err := s.Release(t.Context(), k, c.Token); err != nil {
				t.Fatal(err)
			}
		case c.Outcome == ClaimOwned:
			env := bytes.Repeat([]byte("x"), rng.IntN(4096))
			if rng.IntN(5) == 0 {
				err = s.MarkUnknown(t.Context(), k, c.Token, env, time.Duration(1+rng.IntN(3600))*time.Second)
			} else {
				err = s.Complete(t.Context(), k, c.Token, env, time.Duration(1+rng.IntN(3600))*time.Second)
			}
			if err != nil {
				t.Fatal(err)
			}
		case c.Outcome == ClaimUnknown && rng.IntN(2) == 0:
			if again, err := s.Reclaim(t.Context(), k, Fingerprint{1}, time.Minute, time.Hour); err != nil {
				t.Fatal(err)
			} else if again.Outcome == ClaimOwned {
				_ = s.Complete(t.Context(), k, again.Token, nil, time.Hour)
			}
		}
		if i%50 == 0 {
			clock.Advance(time.Duration(rng.IntN(120)) * time.Second)
		}
		s.mu.Lock()
		checkPartitions(t, s)
		s.mu.Unlock()
	}
}

func checkPartitions(t *testing.T, s *MemoryStore) {
	t.Helper()
	ps := &s.done
	keys, size := 0, int64(0)
	maxKeys, maxBytes := 0, int64(0)
	for caller, p := range ps.parts {
		if p.lru.Len() == 0 {
			t.Fatalf("caller %s has an empty partition", caller)
		}
		var b int64
		for _, k := range p.lru.Keys() {
			m, _ := p.lru.Peek(k)
			if k.Caller != caller || m.size != RecordSize(k, m.rec.Envelope) {
				t.Fatalf("record %v in partition %s has size %d", k, caller, m.size)
			}
			b += m.size
		}
		if b != p.bytes {
			t.Fatalf("partition %s counts %d bytes, holds %d", caller, p.bytes, b)
		}
		keys += p.lru.Len()
		size += b
		maxKeys, maxBytes = max(maxKeys, p.lru.Len()), max(maxBytes, b)
	}
	if keys != ps.keys || size != ps.bytes || keys > s.maxKeys || size > s.maxBytes {
		t.Fatalf("totals %d keys, %d bytes; counted %d, %d; bounds %d, %d", ps.keys, ps.bytes, keys, size, s.maxKeys, s.maxBytes)
	}
	if len(ps.parts) > 0 && (ps.byKeys.Len() != len(ps.parts) || ps.byBytes.Len() != len(ps.parts) ||
		ps.byKeys.parts[0].lru.Len() != maxKeys || ps.byBytes.parts[0].bytes != maxBytes) {
		t.Fatal("the heaps do not put the largest partition first")
	}
}

// TestMemoryStoreStaysWithinMaxBytes stores a hundred 1 MiB envelopes in a
// store bounded to 8 MiB: the store's own count stays within the bound, and
// so does the heap it holds (with a generous margin).
func TestMemoryStoreStaysWithinMaxBytes(t *testing.T) {
	const maxBytes = 8 << 20
	envelope := bytes.Repeat([]byte("x"), 1<<20)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s := NewMemoryStore(MemoryOptions{MaxBytes: maxBytes})
	for i := range 100 {
		completeWith(t, s, callerKey("ops-agent", strconv.Itoa(i)), envelope)
		if s.done.bytes > maxBytes {
			t.Fatalf("after %d records the store counts %d bytes, bound %d", i+1, s.done.bytes, maxBytes)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 3*maxBytes {
		t.Fatalf("the heap grew by %d MiB holding a store bounded to %d MiB", grown>>20, maxBytes>>20)
	}
	_ = s.Close()
}

func TestMemoryStoreSweepsAbandonedFlights(t *testing.T) {
	clock := newStoreClock()
	s := NewMemoryStore(MemoryOptions{Now: clock.Now})
	defer s.Close()
	mustClaim(t, s, idemKey("abandoned"), Fingerprint{1}, time.Second, time.Second)
	clock.Advance(time.Hour)
	mustClaim(t, s, idemKey("live"), Fingerprint{1}, time.Hour, time.Hour)
	expectClaim(t, s, idemKey("live"), Fingerprint{1}, ClaimInFlight, "")
	s.mu.Lock()
	n := len(s.inFlight)
	s.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d in-flight records, want the abandoned one swept", n)
	}
}

func TestMemoryStoreClose(t *testing.T) {
	s := NewMemoryStore(MemoryOptions{})
	k := idemKey("k1")
	mustClaim(t, s, k, Fingerprint{1}, time.Hour, time.Hour)
	ch := waitAsync(s, t.Context(), k)
	time.Sleep(20 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if r := receive(t, ch); !errors.Is(r.err, ErrStoreClosed) {
		t.Fatalf("Wait across Close = %v, want ErrStoreClosed", r.err)
	}
	if _, _, err := s.Get(t.Context(), k); !errors.Is(err, ErrStoreClosed) {
		t.Fatalf("Get after Close = %v, want ErrStoreClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// benchEnvelope is a 1 KiB envelope.
var benchEnvelope = bytes.Repeat([]byte("x"), 1024)

func BenchmarkMemoryStoreClaimComplete(b *testing.B) {
	s := NewMemoryStore(MemoryOptions{})
	defer s.Close()
	keys := make([]IdempotencyKey, b.N)
	for i := range keys {
		keys[i] = idemKey("key-" + strconv.Itoa(i))
	}
	ctx := b.Context()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		c, err := s.Claim(ctx, keys[i], Fingerprint{1}, time.Minute, time.Hour)
		if err != nil || c.Outcome != ClaimOwned {
			b.Fatalf("Claim = %v, %v", c.Outcome, err)
		}
		if err := s.Complete(ctx, keys[i], c.Token, benchEnvelope, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMemoryStoreFootprint fills a store to its default key bound with
// 1 KiB envelopes under UUID-sized keys and reports the heap it holds per
// key, key strings included, beside what RecordSize counts (which should be
// a little more). Its ns/op is meaningless (one fill per run whatever b.N)
// and suppressed.
func BenchmarkMemoryStoreFootprint(b *testing.B) {
	const n = DefaultMaxKeys
	ctx := b.Context()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := NewMemoryStore(MemoryOptions{MaxBytes: 1 << 30})
	for i := range n {
		k := idemKey(fmt.Sprintf("%08d-0000-4000-8000-000000000000", i))
		c, err := s.Claim(ctx, k, Fingerprint{1}, time.Minute, time.Hour)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Complete(ctx, k, c.Token, benchEnvelope, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(s)
	perKey := float64(after.HeapAlloc-before.HeapAlloc) / n
	b.ReportMetric(perKey, "B/key")
	b.ReportMetric(perKey-float64(len(benchEnvelope)), "overhead-B/key")
	b.ReportMetric(float64(s.done.bytes)/n, "counted-B/key")
	b.ReportMetric(0, "ns/op")
	_ = s.Close()
}
