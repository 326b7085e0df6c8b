package policy

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// manualClock is a clock tests move by hand.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func newManualClock(t time.Time) *manualClock { return &manualClock{now: t} }

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func rateCaller(name string, rate *RateSettings, toolRates map[string]RateSettings) *Caller {
	return &Caller{Name: name, Tools: []string{"*"}, Rate: rate, ToolRates: toolRates}
}

// expectAllow calls Allow and fails unless it answers ok and retryAfter.
func expectAllow(t *testing.T, r *RateLimiters, c *Caller, tool string, ok bool, retryAfter time.Duration) {
	t.Helper()
	gotOK, gotWait := r.Allow(c, tool)
	if gotOK != ok || gotWait != retryAfter {
		t.Fatalf("Allow(%s, %s) = %v, %v; want %v, %v", c.Name, tool, gotOK, gotWait, ok, retryAfter)
	}
}

// drain takes n tokens, each of which must be granted.
func drain(t *testing.T, r *RateLimiters, c *Caller, tool string, n int) {
	t.Helper()
	for i := range n {
		if ok, wait := r.Allow(c, tool); !ok {
			t.Fatalf("call %d of %d refused (retry after %v)", i+1, n, wait)
		}
	}
}

func TestRateLimiters(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	t.Run("the burst passes, then the caller waits for the next token", func(t *testing.T) {
		clock := newManualClock(t0)
		r := NewRateLimiters(clock.Now)
		c := rateCaller("ops-agent", &RateSettings{RPS: 2, Burst: 3}, nil)
		drain(t, r, c, "search_articles", 3)
		expectAllow(t, r, c, "search_articles", false, 500*time.Millisecond)
		clock.Advance(499 * time.Millisecond)
		expectAllow(t, r, c, "search_articles", false, time.Millisecond)
		clock.Advance(time.Millisecond)
		expectAllow(t, r, c, "search_articles", true, 0)
		expectAllow(t, r, c, "search_articles", false, 500*time.Millisecond)
	})

	t.Run("refused calls take no token", func(t *testing.T) {
		clock := newManualClock(t0)
		r := NewRateLimiters(clock.Now)
		c := rateCaller("ops-agent", &RateSettings{RPS: 1, Burst: 1}, nil)
		drain(t, r, c, "t", 1)
		for range 10 {
			expectAllow(t, r, c, "t", false, time.Second)
		}
		clock.Advance(time.Second)
		expectAllow(t, r, c, "t", true, 0)
	})

	t.Run("the wait is rounded up to whole milliseconds", func(t *testing.T) {
		clock := newManualClock(t0)
		r := NewRateLimiters(clock.Now)
		c := rateCaller("ops-agent", &RateSettings{RPS: 3, Burst: 1}, nil)
		drain(t, r, c, "t", 1)
		expectAllow(t, r, c, "t", false, 334*time.Millisecond) // 333.33ms
		clock.Advance(333 * time.Millisecond)
		expectAllow(t, r, c, "t", false, time.Millisecond) // 333.33µs
	})

	t.Run("a bucket refills up to its burst and no further", func(t *testing.T) {
		clock := newManualClock(t0)
		r := NewRateLimiters(clock.Now)
		c := rateCaller("ops-agent", &RateSettings{RPS: 20, Burst: 40}, nil)
		drain(t, r, c, "t", 40)
		expectAllow(t, r, c, "t", false, 50*time.Millisecond)
		clock.Advance(time.Hour)
		drain(t, r, c, "t", 40)
		expectAllow(t, r, c, "t", false, 50*time.Millisecond)
	})

	t.Run("tools without an override share the caller's bucket", func(t *testing.T) {
		r := NewRateLimiters(newManualClock(t0).Now)
		c := rateCaller("ops-agent", &RateSettings{RPS: 1, Burst: 2}, nil)
		drain(t, r, c, "search_articles", 1)
		drain(t, r, c, "list_users", 1)
		expectAllow(t, r, c, "search_articles", false, time.Second)
		expectAllow(t, r, c, "list_users", false, time.Second)
	})

	t.Run("a tool override has its own bucket", func(t *testing.T) {
		clock := newManualClock(t0)
		r := NewRateLimiters(clock.Now)
		c := rateCaller("ops-agent", &RateSettings{RPS: 10, Burst: 10},
			map[string]RateSettings{"send_notification": {RPS: 0.5, Burst: 1}})
		drain(t, r, c, "send_notification", 1)
		expectAllow(t, r, c, "send_notification", false, 2*time.Second)
		drain(t, r, c, "search_articles", 10)
		expectAllow(t, r, c, "search_articles", false, 100*time.Millisecond)
		clock.Advance(2 * time.Second)
		expectAllow(t, r, c, "send_notification", true, 0)
	})

	t.Run("a tool override applies even to a caller without its own rate", func(t *testing.T) {
		r := NewRateLimiters(newManualClock(t0).Now)
		c := rateCaller("ops-agent", nil, map[string]RateSettings{"send_notification": {RPS: 1, Burst: 1}})
		drain(t, r, c, "send_notification", 1)
		expectAllow(t, r, c, "send_notification", false, time.Second)
		drain(t, r, c, "search_articles", 1000)
	})

	t.Run("callers have separate buckets", func(t *testing.T) {
		r := NewRateLimiters(newManualClock(t0).Now)
		a := rateCaller("a", &RateSettings{RPS: 1, Burst: 1}, nil)
		b := rateCaller("b", &RateSettings{RPS: 1, Burst: 1}, nil)
		drain(t, r, a, "t", 1)
		drain(t, r, b, "t", 1)
		expectAllow(t, r, a, "t", false, time.Second)
	})

	t.Run("callers without a rate and unlisted callers are not limited", func(t *testing.T) {
		r := NewRateLimiters(newManualClock(t0).Now)
		drain(t, r, rateCaller("free", nil, nil), "t", 1000)
		for range 1000 {
			if ok, wait := r.Allow(nil, "t"); !ok || wait != 0 {
				t.Fatalf("Allow(nil) = %v, %v", ok, wait)
			}
		}
		if n := len(r.buckets); n != 0 {
			t.Fatalf("%d buckets for unlimited callers, want none", n)
		}
	})

	t.Run("invalid settings refuse without a wait", func(t *testing.T) {
		r := NewRateLimiters(newManualClock(t0).Now)
		for _, s := range []RateSettings{{RPS: 0, Burst: 1}, {RPS: -1, Burst: 1}, {RPS: math.NaN(), Burst: 1}, {RPS: 1, Burst: 0}} {
			expectAllow(t, r, rateCaller("bad", &s, nil), "t", false, 0)
		}
	})

	t.Run("a very slow bucket waits at most a day", func(t *testing.T) {
		r := NewRateLimiters(newManualClock(t0).Now)
		c := rateCaller("slow", &RateSettings{RPS: 1e-9, Burst: 1}, nil)
		drain(t, r, c, "t", 1)
		expectAllow(t, r, c, "t", false, 24*time.Hour)
	})

	t.Run("an infinite rate never refuses", func(t *testing.T) {
		r := NewRateLimiters(newManualClock(t0).Now)
		drain(t, r, rateCaller("inf", &RateSettings{RPS: math.Inf(1), Burst: 1}, nil), "t", 1000)
	})
}

func TestRateLimitersAcrossReloads(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

	t.Run("unchanged settings keep the bucket's tokens", func(t *testing.T) {
		r := NewRateLimiters(newManualClock(t0).Now)
		drain(t, r, rateCaller("ops-agent", &RateSettings{RPS: 2, Burst: 3}, nil), "t", 3)
		reloaded := rateCaller("ops-agent", &RateSettings{RPS: 2, Burst: 3}, nil)
		expectAllow(t, r, reloaded, "t", false, 500*time.Millisecond)
	})

	t.Run("a new rate keeps the tokens and refills at the new rate", func(t *testing.T) {
		clock := newManualClock(t0)
		r := NewRateLimiters(clock.Now)
		drain(t, r, rateCaller("ops-agent", &RateSettings{RPS: 2, Burst: 3}, nil), "t", 3)
		clock.Advance(250 * time.Millisecond) // half a token at 2/s
		c := rateCaller("ops-agent", &RateSettings{RPS: 4, Burst: 10}, nil)
		expectAllow(t, r, c, "t", false, 125*time.Millisecond) // the other half at 4/s
		clock.Advance(time.Second)
		drain(t, r, c, "t", 4)
		expectAllow(t, r, c, "t", false, 125*time.Millisecond)
	})

	t.Run("a smaller burst caps the tokens held", func(t *testing.T) {
		r := NewRateLimiters(newManualClock(t0).Now)
		expectAllow(t, r, rateCaller("ops-agent", &RateSettings{RPS: 1, Burst: 10}, nil), "t", true, 0)
		c := rateCaller("ops-agent", &RateSettings{RPS: 1, Burst: 2}, nil)
		drain(t, r, c, "t", 2)
		expectAllow(t, r, c, "t", false, time.Second)
	})

	t.Run("Retain keeps the buckets of callers and overrides that remain", func(t *testing.T) {
		r := NewRateLimiters(newManualClock(t0).Now)
		send := map[string]RateSettings{"send_notification": {RPS: 1, Burst: 1}}
		c := rateCaller("ops-agent", &RateSettings{RPS: 1, Burst: 1}, send)
		drain(t, r, c, "search_articles", 1)
		drain(t, r, c, "send_notification", 1)
		r.Retain(map[string]*Caller{"ops-agent": rateCaller("ops-agent", &RateSettings{RPS: 1, Burst: 1}, send)})
		expectAllow(t, r, c, "search_articles", false, time.Second)
		expectAllow(t, r, c, "send_notification", false, time.Second)
	})

	t.Run("Retain drops the buckets of callers that are gone", func(t *testing.T) {
		r := NewRateLimiters(newManualClock(t0).Now)
		gone := rateCaller("gone-agent", &RateSettings{RPS: 1, Burst: 1}, nil)
		kept := rateCaller("ops-agent", &RateSettings{RPS: 1, Burst: 1}, nil)
		drain(t, r, gone, "t", 1)
		drain(t, r, kept, "t", 1)
		r.Retain(map[string]*Caller{"ops-agent": kept})
		if _, ok := r.buckets[RateKey{"gone-agent", RateAllTools}]; ok {
			t.Fatal("the bucket of a caller that is gone was kept")
		}
		// Should the name come back, it starts with a full bucket.
		expectAllow(t, r, gone, "t", true, 0)
		expectAllow(t, r, kept, "t", false, time.Second)
	})

	t.Run("Retain drops overrides and caller rates that are gone", func(t *testing.T) {
		r := NewRateLimiters(newManualClock(t0).Now)
		c := rateCaller("ops-agent", &RateSettings{RPS: 1, Burst: 1},
			map[string]RateSettings{"send_notification": {RPS: 1, Burst: 1}, "search_articles": {RPS: 1, Burst: 1}})
		for _, tool := range []string{"send_notification", "search_articles", "other"} {
			drain(t, r, c, tool, 1)
		}
		r.Retain(map[string]*Caller{"ops-agent": rateCaller("ops-agent", nil,
			map[string]RateSettings{"search_articles": {RPS: 1, Burst: 1}})})
		var keys []RateKey
		for k := range r.buckets {
			keys = append(keys, k)
		}
		if len(keys) != 1 || keys[0] != (RateKey{"ops-agent", "search_articles"}) {
			t.Fatalf("buckets after Retain: %v; want only ops-agent/search_articles", keys)
		}
	})
}

func TestRateLimitersConcurrent(t *testing.T) {
	t.Run("concurrent calls never take more than the burst", func(t *testing.T) {
		r := NewRateLimiters(newManualClock(time.Unix(1e9, 0)).Now)
		c := rateCaller("ops-agent", &RateSettings{RPS: 1, Burst: 37}, nil)
		var granted atomic.Int64
		var wg sync.WaitGroup
		for range 100 {
			wg.Go(func() {
				for range 5 {
					if ok, _ := r.Allow(c, "t"); ok {
						granted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if n := granted.Load(); n != 37 {
			t.Fatalf("%d calls granted, want 37", n)
		}
	})

	t.Run("calls, reloads and Retain may overlap", func(t *testing.T) {
		clock := newManualClock(time.Unix(1e9, 0))
		r := NewRateLimiters(clock.Now)
		callers := []*Caller{
			rateCaller("ops-agent", &RateSettings{RPS: 5, Burst: 5}, map[string]RateSettings{"a": {RPS: 1, Burst: 1}}),
			rateCaller("ops-agent", &RateSettings{RPS: 50, Burst: 2}, nil),
		}
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 500 {
					c := callers[(g+i)%2]
					if ok, wait := r.Allow(c, []string{"a", "b"}[i%2]); !ok && wait < time.Millisecond {
						t.Errorf("refused with a wait of %v", wait)
						return
					}
					if i%50 == 0 {
						clock.Advance(10 * time.Millisecond)
						r.Retain(map[string]*Caller{"ops-agent": c})
					}
				}
			})
		}
		wg.Wait()
	})
}

func TestRateLimitersAllowDoesNotAllocate(t *testing.T) {
	r := NewRateLimiters(newManualClock(time.Unix(1e9, 0)).Now)
	c := rateCaller("ops-agent", &RateSettings{RPS: 1e9, Burst: 1 << 30},
		map[string]RateSettings{"send_notification": {RPS: 1, Burst: 1}})
	r.Allow(c, "search_articles")
	r.Allow(c, "send_notification")
	for _, tool := range []string{"search_articles", "send_notification"} {
		if n := testing.AllocsPerRun(100, func() { r.Allow(c, tool) }); n != 0 {
			t.Errorf("Allow(%s) allocates %v times per call, want 0", tool, n)
		}
	}
}

func TestWaitMillis(t *testing.T) {
	for _, tc := range []struct {
		seconds float64
		want    time.Duration
	}{
		{0, time.Millisecond},
		{-1, time.Millisecond},
		{math.NaN(), time.Millisecond},
		{1e-9, time.Millisecond},
		{0.001, time.Millisecond},
		{0.0010000000000000009, time.Millisecond},
		{0.0010001, 2 * time.Millisecond},
		{0.5, 500 * time.Millisecond},
		{1.0 / 3, 334 * time.Millisecond},
		{1e6, 24 * time.Hour},
		{math.Inf(1), 24 * time.Hour},
	} {
		if got := WaitMillis(tc.seconds); got != tc.want {
			t.Errorf("WaitMillis(%v) = %v, want %v", tc.seconds, got, tc.want)
		}
	}
}

func BenchmarkRateLimitersAllow(b *testing.B) {
	r := NewRateLimiters(time.Now)
	c := rateCaller("ops-agent", &RateSettings{RPS: 1e12, Burst: 1 << 30}, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r.Allow(c, "search_articles")
		}
	})
}
