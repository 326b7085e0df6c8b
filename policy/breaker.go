package policy

import (
	"errors"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
)

// BreakerSettings configures an upstream's circuit breaker. It opens after
// ConsecutiveFailures failures in a row, or when at least MinRequests calls
// in Window failed with a ratio of at least FailureRatio; it stays open for
// OpenFor, then lets HalfOpenRequests probes through.
type BreakerSettings struct {
	ConsecutiveFailures uint32
	FailureRatio        float64
	MinRequests         uint32
	Window              time.Duration
	OpenFor             time.Duration
	HalfOpenRequests    uint32
}

// DefaultBreakerSettings are used for upstreams without a breaker block.
func DefaultBreakerSettings() BreakerSettings {
	return BreakerSettings{
		ConsecutiveFailures: 5,
		FailureRatio:        0.5,
		MinRequests:         20,
		Window:              60 * time.Second,
		OpenFor:             30 * time.Second,
		HalfOpenRequests:    3,
	}
}

// BreakerState is the breaker's state, with the values of the
// toolgate_circuit_state gauge.
type BreakerState int

// The breaker states.
const (
	BreakerClosed   BreakerState = 0
	BreakerHalfOpen BreakerState = 1
	BreakerOpen     BreakerState = 2
)

// Verdict is what one call through the breaker counts as.
type Verdict uint8

// The verdicts. Ignored calls count neither way: 4xx answers (429 included),
// 501, 505 and calls cancelled by the caller say nothing about the
// upstream's health.
const (
	VerdictSuccess Verdict = iota
	VerdictFailure
	VerdictIgnored
)

var (
	errBreakerFailure  = errors.New("upstream failure")
	errBreakerExcluded = errors.New("not counted")
)

// ErrCircuitOpen is returned by Allow when the breaker refuses a call.
var ErrCircuitOpen = errors.New("circuit open")

// BreakerOptions are a breaker's collaborators. Zero values: time.Now and no
// callback.
type BreakerOptions struct {
	Now           func() time.Time
	OnStateChange func(name string, to BreakerState)
}

// Breaker is a circuit breaker for one upstream, built on sony/gobreaker's
// two-step breaker so the caller reports each call's verdict after it has
// classified the answer. gobreaker reads the wall clock itself; tests run
// it inside a testing/synctest bubble to move time.
type Breaker struct {
	name     string
	settings BreakerSettings
	cb       *gobreaker.TwoStepCircuitBreaker[struct{}]
	now      func() time.Time

	mu       sync.Mutex
	openedAt time.Time
}

// NewBreaker creates a breaker named after its upstream.
func NewBreaker(name string, s BreakerSettings, opts BreakerOptions) *Breaker {
	b := &Breaker{name: name, settings: s, now: opts.Now}
	if b.now == nil {
		b.now = time.Now
	}
	st := gobreaker.Settings{
		Name:        name,
		MaxRequests: s.HalfOpenRequests,
		Interval:    s.Window,
		Timeout:     s.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			if s.ConsecutiveFailures > 0 && c.ConsecutiveFailures >= s.ConsecutiveFailures {
				return true
			}
			// Excluded calls (4xx, cancellations) say nothing about health.
			counted := c.Requests - min(c.TotalExclusions, c.Requests)
			if s.MinRequests > 0 && counted >= s.MinRequests && s.FailureRatio > 0 {
				return float64(c.TotalFailures)/float64(counted) >= s.FailureRatio
			}
			return false
		},
		IsSuccessful: func(err error) bool { return err == nil },
		IsExcluded:   func(err error) bool { return errors.Is(err, errBreakerExcluded) },
		OnStateChange: func(_ string, _, to gobreaker.State) {
			if to == gobreaker.StateOpen {
				b.mu.Lock()
				b.openedAt = b.now()
				b.mu.Unlock()
			}
			if opts.OnStateChange != nil {
				opts.OnStateChange(name, fromGobreaker(to))
			}
		},
	}
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](st)
	return b
}

// Settings returns the settings the breaker was built with.
func (b *Breaker) Settings() BreakerSettings { return b.settings }

// Ticket is one call the breaker let through; Done reports its verdict.
type Ticket struct{ report func(error) }

// Done reports the call's verdict. It must be called exactly once.
func (t Ticket) Done(v Verdict) {
	switch v {
	case VerdictSuccess:
		t.report(nil)
	case VerdictFailure:
		t.report(errBreakerFailure)
	default:
		t.report(errBreakerExcluded)
	}
}

// Allow asks to send one call. On success, the ticket's Done must be
// called exactly once with the call's verdict. When the breaker refuses,
// the error is ErrCircuitOpen and retryAfter is how long it stays open (at
// least a second while half-open probes are busy).
func (b *Breaker) Allow() (t Ticket, retryAfter time.Duration, err error) {
	report, err := b.cb.Allow()
	if err != nil {
		return Ticket{}, b.remainingOpen(), ErrCircuitOpen
	}
	return Ticket{report: report}, 0, nil
}

func (b *Breaker) remainingOpen() time.Duration {
	b.mu.Lock()
	opened := b.openedAt
	b.mu.Unlock()
	left := b.settings.OpenFor - b.now().Sub(opened)
	if left < time.Second {
		left = time.Second
	}
	return left
}

// State returns the breaker's current state.
func (b *Breaker) State() BreakerState { return fromGobreaker(b.cb.State()) }

func fromGobreaker(s gobreaker.State) BreakerState {
	switch s {
	case gobreaker.StateOpen:
		return BreakerOpen
	case gobreaker.StateHalfOpen:
		return BreakerHalfOpen
	default:
		return BreakerClosed
	}
}
