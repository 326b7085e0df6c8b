package policy

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// RateLimiter decides whether a call may go ahead under its caller's rate
// limit. RateLimiters keeps the buckets in process memory, per replica;
// redisstate.RateLimiters shares them between the replicas of a service.
type RateLimiter interface {
	// Take takes one token for a call of tool by caller. When the bucket is
	// empty it reports false and how long until a token is available
	// (whole milliseconds, at least one). A nil caller, or one without a
	// rate for this tool, is always allowed. A non-nil error says the
	// shared store failed: ok and retryAfter are then the verdict the
	// limiter fell back to (see State.OnError).
	Take(ctx context.Context, caller *Caller, tool string) (ok bool, retryAfter time.Duration, err error)
	// Retain drops what the policy with these callers no longer uses; call
	// it after every successful reload.
	Retain(callers map[string]*Caller)
}

var _ RateLimiter = (*RateLimiters)(nil)

// RateLimiters holds the token buckets of the callers' rate limits, one per
// caller and tool override, and keeps them across policy reloads.
//
// A call of tool by a caller draws one token from the caller's bucket for
// that tool when Caller.ToolRates names it, else from the caller's own bucket
// shared by all its other tools (Caller.Rate), else it is not limited.
// Callers the policy does not list (a nil *Caller) are not limited: the
// number of buckets is bounded by the policy, never by what agents send.
//
// Buckets are keyed by names, not by the snapshot's values, so a reload keeps
// their tokens. When a reload changes a bucket's rps or burst, the bucket is
// adjusted in place on its next use: the tokens it holds stay (capped by a
// smaller burst) and refill at the new rate from then on. Retain drops the
// buckets the new policy no longer uses.
//
// A refused call takes no token, so agents that keep retrying too early do
// not push their own wait further out.
//
// The buckets live in this process: each replica limits on its own, so n
// replicas together allow up to n times a caller's rate. redisstate.RateLimiters
// shares them.
type RateLimiters struct {
	now func() time.Time

	mu      sync.RWMutex
	buckets map[RateKey]*rateBucket
}

// RateKey names a bucket: a caller and the tool of an override, or
// RateAllTools for the caller's own bucket.
type RateKey struct {
	Caller, Tool string
}

// RateAllTools is the tool part of the key of a caller's own bucket. Tool
// names cannot be "*" (in a caller's tool list it means every tool), so it
// never collides with an override.
const RateAllTools = "*"

type rateBucket struct {
	lim *rate.Limiter
	// settings is what lim was last set to. Allow compares it with the
	// caller's settings on every call: one atomic load when nothing changed.
	settings atomic.Pointer[RateSettings]
	// mu serializes changes of the settings, so lim and settings always
	// change together even when calls of an old and a new snapshot overlap.
	mu sync.Mutex
}

// NewRateLimiters returns an empty set of buckets reading time from now
// (time.Now when nil).
func NewRateLimiters(now func() time.Time) *RateLimiters {
	if now == nil {
		now = time.Now
	}
	return &RateLimiters{now: now, buckets: make(map[RateKey]*rateBucket)}
}

// Allow takes one token for a call of tool by caller. When the bucket is
// empty it reports false and how long until a token is available, rounded up
// to whole milliseconds and at least one millisecond. A nil caller, or one
// without a rate for this tool, is always allowed.
//
// Settings the policy compiler rejects (rps not positive, burst below one)
// refuse every call, with a retryAfter of zero: waiting will not help.
func (r *RateLimiters) Allow(caller *Caller, tool string) (ok bool, retryAfter time.Duration) {
	s, k, limited := RateFor(caller, tool)
	if !limited {
		return true, 0
	}
	if !s.Valid() {
		return false, 0
	}
	now := r.now()
	b := r.bucket(k, s)
	if cur := b.settings.Load(); *cur != s {
		b.update(s, now)
	}
	if b.lim.AllowN(now, 1) {
		return true, 0
	}
	// The bucket holds less than one token (a refused AllowN changes
	// nothing); the rest refills at rps. Another call may take or change
	// the bucket in between: the wait is then a little off, but never
	// under the millisecond WaitMillis guarantees.
	missing := 1 - b.lim.TokensAt(now)
	return false, WaitMillis(missing / float64(b.lim.Limit()))
}

// Take implements RateLimiter with Allow; it never fails.
func (r *RateLimiters) Take(_ context.Context, caller *Caller, tool string) (bool, time.Duration, error) {
	ok, wait := r.Allow(caller, tool)
	return ok, wait, nil
}

// RateInspector is a RateLimiter that tells how full a bucket is without
// taking a token, for the admin console. The memory RateLimiters is one;
// the Redis limiters are not (the buckets live in Redis, shared by the
// replicas), and the console says so.
type RateInspector interface {
	// Tokens returns the tokens bucket k holds now; used is false for a
	// bucket no call has drawn from yet, which is full.
	Tokens(k RateKey) (tokens float64, used bool)
}

var _ RateInspector = (*RateLimiters)(nil)

// Tokens implements RateInspector.
func (r *RateLimiters) Tokens(k RateKey) (tokens float64, used bool) {
	r.mu.RLock()
	b := r.buckets[k]
	r.mu.RUnlock()
	if b == nil {
		return 0, false
	}
	return b.lim.TokensAt(r.now()), true
}

// RateFor returns the settings that limit a call of tool by caller and the
// bucket they apply to; limited is false when nothing limits the call.
func RateFor(caller *Caller, tool string) (s RateSettings, k RateKey, limited bool) {
	if caller == nil {
		return RateSettings{}, RateKey{}, false
	}
	k = RateKey{Caller: caller.Name, Tool: tool}
	s, found := caller.ToolRates[tool]
	if !found {
		if caller.Rate == nil {
			return RateSettings{}, RateKey{}, false
		}
		s, k.Tool = *caller.Rate, RateAllTools
	}
	return s, k, true
}

// Valid reports settings the policy compiler accepts; others refuse every
// call.
func (s RateSettings) Valid() bool { return s.RPS > 0 && s.Burst >= 1 }

// bucket returns the bucket for k, creating it full with settings s.
func (r *RateLimiters) bucket(k RateKey, s RateSettings) *rateBucket {
	r.mu.RLock()
	b := r.buckets[k]
	r.mu.RUnlock()
	if b != nil {
		return b
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if b = r.buckets[k]; b == nil {
		// A new limiter starts full.
		b = &rateBucket{lim: rate.NewLimiter(rate.Limit(s.RPS), s.Burst)}
		applied := s // declared here so only creation allocates
		b.settings.Store(&applied)
		r.buckets[k] = b
	}
	return b
}

// update applies new settings to the bucket without emptying or refilling it.
func (b *rateBucket) update(s RateSettings, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := b.settings.Load()
	if *cur == s {
		return
	}
	if cur.RPS != s.RPS {
		b.lim.SetLimitAt(now, rate.Limit(s.RPS))
	}
	if cur.Burst != s.Burst {
		b.lim.SetBurstAt(now, s.Burst)
	}
	applied := s
	b.settings.Store(&applied)
}

// Retain drops the buckets the policy with these callers no longer uses: a
// caller that is gone, a tool override that is gone, or a caller's own
// bucket once it has no rate. Call it after every successful reload with the
// new snapshot's Access.Callers. A call still running on the old snapshot
// may recreate a bucket just dropped; the next Retain drops it again.
func (r *RateLimiters) Retain(callers map[string]*Caller) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.buckets {
		c := callers[k.Caller]
		keep := false
		switch {
		case c == nil:
		case k.Tool == RateAllTools:
			keep = c.Rate != nil
		default:
			_, keep = c.ToolRates[k.Tool]
		}
		if !keep {
			delete(r.buckets, k)
		}
	}
}

// WaitMillis turns a wait in seconds into a duration rounded up to whole
// milliseconds, at least one and at most a day (a bucket that refills slower
// than that is as good as closed, and the bound keeps the conversion from
// overflowing). The wait is first rounded to whole nanoseconds, so float
// noise (1.0000000000000009ms) does not add a millisecond.
func WaitMillis(seconds float64) time.Duration {
	const maxWait = 24 * time.Hour
	ns := math.Round(seconds * 1e9)
	switch {
	case !(ns > 0): // also NaN
		return time.Millisecond
	case ns >= float64(maxWait):
		return maxWait
	}
	d := time.Duration(ns)
	return (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}
