package policy

import (
	"bytes"
	"errors"
	"fmt"
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

func TestMemoryStore(t *testing.T) {
	testStoreConformance(t, func(t *testing.T) storeTarget {
		clock := newStoreClock()
		s := NewMemoryStore(MemoryOptions{Now: clock.Now})
		t.Cleanup(func() { _ = s.Close() })
		return storeTarget{store: s, advance: clock.Advance}
	})
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

	t.Run("a zero MaxKeys means the default bound", func(t *testing.T) {
		s := NewMemoryStore(MemoryOptions{})
		defer s.Close()
		if s.maxKeys != DefaultMaxKeys {
			t.Fatalf("maxKeys = %d, want %d", s.maxKeys, DefaultMaxKeys)
		}
	})
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

// BenchmarkMemoryStoreFootprint fills a store to its default bound with 1 KiB
// envelopes under UUID-sized keys and reports the heap it holds per key, key
// strings included. Its ns/op is meaningless (one fill per run whatever b.N)
// and suppressed.
func BenchmarkMemoryStoreFootprint(b *testing.B) {
	const n = DefaultMaxKeys
	ctx := b.Context()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := NewMemoryStore(MemoryOptions{})
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
	b.ReportMetric(0, "ns/op")
	_ = s.Close()
}
