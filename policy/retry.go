package policy

import (
	"math/rand/v2"
	"time"
)

// RetrySettings is an upstream's retry policy. Attempts is the total number
// of attempts, the first included (1 means no retry). Retries only happen
// for calls that are safe to resend, and never past the call's deadline.
type RetrySettings struct {
	Attempts   int
	Backoff    time.Duration
	MaxBackoff time.Duration
}

// DefaultRetrySettings are used for upstreams without a retries block: one
// attempt.
func DefaultRetrySettings() RetrySettings {
	return RetrySettings{Attempts: 1, Backoff: 100 * time.Millisecond, MaxBackoff: 2 * time.Second}
}

// Delay is the wait before attempt n (n >= 2): exponential from Backoff,
// capped at MaxBackoff, with "equal jitter" (half fixed, half random) so
// replicas that failed together do not retry together. jitter returns a
// number in [0, 1); nil means math/rand/v2.
func (r RetrySettings) Delay(n int, jitter func() float64) time.Duration {
	if n < 2 || r.Backoff <= 0 {
		return 0
	}
	d := r.Backoff
	for i := 2; i < n && d < r.MaxBackoff; i++ {
		d *= 2
	}
	if r.MaxBackoff > 0 && d > r.MaxBackoff {
		d = r.MaxBackoff
	}
	if jitter == nil {
		jitter = rand.Float64
	}
	half := d / 2
	return half + time.Duration(jitter()*float64(d-half))
}
