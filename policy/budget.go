package policy

// Cost budgets: a cap on the sum of a caller's call costs over fixed windows.
//
// A window of length per starts at every multiple of per since the Unix
// epoch (not Go's zero time), so every replica computes the same windows
// from its own clock, and a window of 1h starts on the hour. Costs are
// counted in whole millionths (micro-units, cost*1e6 rounded), in both
// stores, so repeated sums never drift: 37 calls of 0.1 fit a budget of 3.7
// exactly. A cost below half a millionth rounds to nothing and is free.
//
// What is guaranteed: Spend is atomic per caller (concurrent spends never
// take a window past its limit; the Redis store across replicas too), and a
// new window starts at zero. What is not: the memory store counts per
// replica, so n replicas together allow up to n times the budget; replicas
// whose clocks disagree by e may charge a call to the previous window for up
// to e after a boundary; and a store that loses its data (a restart of the
// process or of a Redis without persistence) forgets what was spent.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"
)

// BudgetStore keeps the cost budgets of callers.
type BudgetStore interface {
	// Spend takes cost from caller's current window of b unless that would
	// take the window past b.Cost. The charge reports whether it was taken
	// and when the window ends. Spending is atomic: concurrent calls never
	// overshoot. A cost of zero (or less) passes without touching the store.
	// Settings with a non-positive Cost or a Per under a millisecond are an
	// error (the policy compiler rejects them).
	Spend(ctx context.Context, caller string, cost float64, b BudgetSettings) (BudgetCharge, error)
	// Refund gives a charge's cost back to the window it was taken from, for
	// a call that turned out never to reach the backend (or was answered by
	// a replay). It does nothing for a charge that took nothing, or whose
	// window has ended. Refund each charge at most once (the Redis store
	// tolerates its client's retries, the memory store has none), with a
	// context that outlives the call's own (context.WithoutCancel): calls
	// that are cancelled are the ones most often refunded.
	Refund(ctx context.Context, c BudgetCharge) error
}

// BudgetInspector is a BudgetStore that tells what a caller has spent of
// its current window without spending, for the admin console. Both stores
// are: the memory store per replica, the Redis store for all of them (one
// read).
type BudgetInspector interface {
	// Spent returns the cost caller has spent in the current window of b,
	// and how long until that window ends. Settings the compiler would
	// refuse report nothing spent and no reset.
	Spent(ctx context.Context, caller string, b BudgetSettings) (spent float64, resetIn time.Duration, err error)
}

// BudgetCharge is the outcome of BudgetStore.Spend, and what Refund needs to
// give it back.
type BudgetCharge struct {
	// OK reports whether the call may go ahead: the cost was taken, or was
	// zero.
	OK bool
	// ResetIn is how long until the window ends and a fresh budget starts;
	// for a refused call, when to try again. Zero for a zero cost.
	ResetIn time.Duration
	// Caller and Cost are what was asked for.
	Caller string
	Cost   float64
	// Window is the start of the window the cost was taken from. It is zero
	// when nothing was taken (refused, or a zero cost): Refund then does
	// nothing.
	Window time.Time
	// Token identifies the charge to a store that refunds each charge at
	// most once however often Refund runs (redisstate.Budgets); empty otherwise.
	Token string
}

// ErrBudgetSettings wraps invalid budget settings.
var ErrBudgetSettings = errors.New("invalid budget settings")

// maxBudgetUnits bounds costs and limits in micro-units. Redis's Lua counts
// in doubles; below 2^52 the sum of a spent total and a cost, each within
// the bound, is exact. It is about 4.5 billion cost units, beyond any budget.
const maxBudgetUnits = 1 << 52

// BudgetUnits converts a cost to micro-units, clamped to [0, maxBudgetUnits].
func BudgetUnits(cost float64) int64 {
	u := math.Round(cost * 1e6)
	switch {
	case !(u > 0): // also NaN
		return 0
	case u >= maxBudgetUnits:
		return maxBudgetUnits
	}
	return int64(u)
}

// budgetWindow returns the window of length per containing now: its start
// and how long until its end. per must be positive.
func budgetWindow(now time.Time, per time.Duration) (start time.Time, resetIn time.Duration) {
	ns := now.UnixNano()
	off := ns % int64(per)
	if off < 0 { // before 1970
		off += int64(per)
	}
	return time.Unix(0, ns-off), per - time.Duration(off)
}

// checkBudget validates settings, returning the limit in micro-units.
func checkBudget(b BudgetSettings) (int64, error) {
	if !(b.Cost > 0) || b.Per < time.Millisecond {
		return 0, fmt.Errorf("%w: cost %v per %v", ErrBudgetSettings, b.Cost, b.Per)
	}
	return BudgetUnits(b.Cost), nil
}

// MemoryBudgets is a BudgetStore for a single replica, in process memory:
// each replica counts its own spending. It keeps one window per caller (the
// latest one charged) and starts no goroutines.
type MemoryBudgets struct {
	now func() time.Time

	mu      sync.Mutex
	windows map[string]memBudgetWindow // by caller
}

type memBudgetWindow struct {
	start int64 // Unix nanoseconds
	spent int64 // micro-units
}

var _ BudgetStore = (*MemoryBudgets)(nil)

// NewMemoryBudgets returns an empty memory store reading time from now
// (time.Now when nil).
func NewMemoryBudgets(now func() time.Time) *MemoryBudgets {
	if now == nil {
		now = time.Now
	}
	return &MemoryBudgets{now: now, windows: make(map[string]memBudgetWindow)}
}

var _ BudgetInspector = (*MemoryBudgets)(nil)

// Spent implements BudgetInspector.
func (m *MemoryBudgets) Spent(_ context.Context, caller string, b BudgetSettings) (spent float64, resetIn time.Duration, err error) {
	start, resetIn, ok := CurrentWindow(b, m.now())
	if !ok {
		return 0, 0, nil
	}
	m.mu.Lock()
	w, found := m.windows[caller]
	m.mu.Unlock()
	if !found || w.start != start.UnixNano() {
		return 0, resetIn, nil
	}
	return float64(w.spent) / 1e6, resetIn, nil
}

// CurrentWindow is the window of b that now falls in: its start and how
// long until it ends; ok is false for settings the compiler would refuse.
func CurrentWindow(b BudgetSettings, now time.Time) (start time.Time, resetIn time.Duration, ok bool) {
	if _, err := checkBudget(b); err != nil {
		return time.Time{}, 0, false
	}
	start, resetIn = budgetWindow(now, b.Per)
	return start, resetIn, true
}

// PrepareSpend is what every store does before it counts: a charge that
// passes, the cost in units (0: free, nothing to count), the limit, and the
// window now falls in.
func PrepareSpend(caller string, cost float64, b BudgetSettings, now time.Time) (ch BudgetCharge, units, limit int64, start time.Time, err error) {
	ch = BudgetCharge{OK: true, Caller: caller, Cost: cost}
	if units = BudgetUnits(cost); units == 0 {
		return ch, 0, 0, time.Time{}, nil
	}
	if limit, err = checkBudget(b); err != nil {
		return BudgetCharge{}, 0, 0, time.Time{}, err
	}
	start, ch.ResetIn = budgetWindow(now, b.Per)
	return ch, units, limit, start, nil
}

// Spend implements BudgetStore.
func (m *MemoryBudgets) Spend(_ context.Context, caller string, cost float64, b BudgetSettings) (BudgetCharge, error) {
	ch, units, limit, start, err := PrepareSpend(caller, cost, b, m.now())
	if err != nil || units == 0 {
		return ch, err
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	w := m.windows[caller]
	if w.start != start.UnixNano() {
		// Another window (normally the previous one, or one of another
		// length after a reload): this one starts at zero, like a fresh
		// Redis key.
		w = memBudgetWindow{start: start.UnixNano()}
	}
	if w.spent+units > limit {
		ch.OK = false
		return ch, nil
	}
	w.spent += units
	m.windows[caller] = w
	ch.Window = start
	return ch, nil
}

// Refund implements BudgetStore.
func (m *MemoryBudgets) Refund(_ context.Context, c BudgetCharge) error {
	units := BudgetUnits(c.Cost)
	if !c.OK || c.Window.IsZero() || units == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.windows[c.Caller]
	if !ok || w.start != c.Window.UnixNano() {
		return nil // that window is over
	}
	w.spent = max(w.spent-units, 0)
	m.windows[c.Caller] = w
	return nil
}
