package policy

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// budgetT0 is 2023-11-14 22:13:20 UTC: 13m20s into an hour-long window.
var budgetT0 = time.Unix(1_700_000_000, 0)

// budgetTarget is one BudgetStore under test, on a clock the test moves.
type budgetTarget struct {
	store BudgetStore
	clock *manualClock
}

func mustSpend(t *testing.T, s BudgetStore, caller string, cost float64, b BudgetSettings) BudgetCharge {
	t.Helper()
	ch, err := s.Spend(t.Context(), caller, cost, b)
	if err != nil {
		t.Fatalf("Spend(%s, %v): %v", caller, cost, err)
	}
	return ch
}

// expectSpend spends and fails unless the answer is ok with resetIn.
func expectSpend(t *testing.T, s BudgetStore, caller string, cost float64, b BudgetSettings, ok bool, resetIn time.Duration) BudgetCharge {
	t.Helper()
	ch := mustSpend(t, s, caller, cost, b)
	if ch.OK != ok || ch.ResetIn != resetIn {
		t.Fatalf("Spend(%s, %v) = ok %v, reset in %v; want %v, %v", caller, cost, ch.OK, ch.ResetIn, ok, resetIn)
	}
	if ch.Caller != caller || ch.Cost != cost {
		t.Fatalf("the charge names %s, %v; want %s, %v", ch.Caller, ch.Cost, caller, cost)
	}
	if ch.OK != !ch.Window.IsZero() {
		t.Fatalf("charge %+v: a window must be named exactly when the cost was taken", ch)
	}
	return ch
}

func mustRefund(t *testing.T, s BudgetStore, ch BudgetCharge) {
	t.Helper()
	if err := s.Refund(t.Context(), ch); err != nil {
		t.Fatalf("Refund(%+v): %v", ch, err)
	}
}

// testBudgetConformance is the behaviour every BudgetStore shares. newStore
// returns a fresh store, empty for every caller name, whose clock starts at
// budgetT0.
func testBudgetConformance(t *testing.T, newStore func(t *testing.T) budgetTarget) {
	hourly := BudgetSettings{Cost: 1.0, Per: time.Hour}
	const left = 46*time.Minute + 40*time.Second // of the window at budgetT0

	t.Run("spending stops at the limit until the window resets", func(t *testing.T) {
		s := newStore(t)
		for range 3 {
			expectSpend(t, s.store, "ops-agent", 0.3, hourly, true, left)
		}
		expectSpend(t, s.store, "ops-agent", 0.3, hourly, false, left)
		s.clock.Advance(40 * time.Minute)
		expectSpend(t, s.store, "ops-agent", 0.3, hourly, false, left-40*time.Minute)
		ch := expectSpend(t, s.store, "ops-agent", 0.1, hourly, true, left-40*time.Minute) // exactly 1.0
		if want := time.Unix(1_699_999_200, 0); !ch.Window.Equal(want) {
			t.Fatalf("window %v, want %v", ch.Window, want)
		}
		expectSpend(t, s.store, "ops-agent", 0.000001, hourly, false, left-40*time.Minute)
		s.clock.Advance(left - 40*time.Minute - time.Nanosecond)
		expectSpend(t, s.store, "ops-agent", 0.1, hourly, false, time.Nanosecond)
		s.clock.Advance(time.Nanosecond)
		ch = expectSpend(t, s.store, "ops-agent", 1.0, hourly, true, time.Hour)
		if want := time.Unix(1_700_002_800, 0); !ch.Window.Equal(want) {
			t.Fatalf("window %v, want %v", ch.Window, want)
		}
		expectSpend(t, s.store, "ops-agent", 0.1, hourly, false, time.Hour)
	})

	t.Run("a cost larger than the budget is always refused", func(t *testing.T) {
		s := newStore(t)
		expectSpend(t, s.store, "ops-agent", 1.5, hourly, false, left)
		expectSpend(t, s.store, "ops-agent", 1.0, hourly, true, left)
	})

	t.Run("sums of decimal costs do not drift", func(t *testing.T) {
		s := newStore(t)
		b := BudgetSettings{Cost: 3.7, Per: time.Hour}
		for i := range 37 {
			if ch := mustSpend(t, s.store, "ops-agent", 0.1, b); !ch.OK {
				t.Fatalf("spend %d of 37 refused", i+1)
			}
		}
		expectSpend(t, s.store, "ops-agent", 0.1, b, false, left)
	})

	t.Run("zero costs always pass and leave the budget alone", func(t *testing.T) {
		s := newStore(t)
		expectSpend(t, s.store, "ops-agent", 1.0, hourly, true, left)
		for _, cost := range []float64{0, -1, 0.0000004} {
			ch := mustSpend(t, s.store, "ops-agent", cost, hourly)
			if !ch.OK || ch.ResetIn != 0 || !ch.Window.IsZero() {
				t.Fatalf("Spend(%v) = %+v; want ok, no window", cost, ch)
			}
			mustRefund(t, s.store, ch)
		}
		if ch, err := s.store.Spend(t.Context(), "ops-agent", 0, BudgetSettings{}); err != nil || !ch.OK {
			t.Fatalf("a zero cost under invalid settings: %+v, %v; want ok", ch, err)
		}
		expectSpend(t, s.store, "ops-agent", 0.1, hourly, false, left)
	})

	t.Run("callers have separate budgets", func(t *testing.T) {
		s := newStore(t)
		expectSpend(t, s.store, "ops-agent", 1.0, hourly, true, left)
		expectSpend(t, s.store, "research-agent", 1.0, hourly, true, left)
		expectSpend(t, s.store, "ops-agent", 0.1, hourly, false, left)
	})

	t.Run("windows are aligned to the Unix epoch", func(t *testing.T) {
		s := newStore(t)
		// 7h does not divide a day: Go's zero-time Truncate would disagree.
		b := BudgetSettings{Cost: 1, Per: 7 * time.Hour}
		ch := expectSpend(t, s.store, "ops-agent", 0.5, b, true, 17_200*time.Second)
		if want := time.Unix(1_699_992_000, 0); !ch.Window.Equal(want) {
			t.Fatalf("window %v, want %v", ch.Window, want)
		}
	})

	t.Run("a new limit applies to what the window already spent", func(t *testing.T) {
		s := newStore(t)
		expectSpend(t, s.store, "ops-agent", 0.9, hourly, true, left)
		expectSpend(t, s.store, "ops-agent", 0.2, hourly, false, left)
		raised := BudgetSettings{Cost: 2, Per: time.Hour}
		expectSpend(t, s.store, "ops-agent", 1.1, raised, true, left)
		expectSpend(t, s.store, "ops-agent", 0.1, raised, false, left)
	})

	t.Run("a refund gives the cost back to its window", func(t *testing.T) {
		s := newStore(t)
		expectSpend(t, s.store, "ops-agent", 0.6, hourly, true, left)
		ch := expectSpend(t, s.store, "ops-agent", 0.4, hourly, true, left)
		expectSpend(t, s.store, "ops-agent", 0.4, hourly, false, left)
		mustRefund(t, s.store, ch)
		expectSpend(t, s.store, "ops-agent", 0.4, hourly, true, left)
		expectSpend(t, s.store, "ops-agent", 0.1, hourly, false, left)
	})

	t.Run("refunding a refused charge gives nothing back", func(t *testing.T) {
		s := newStore(t)
		expectSpend(t, s.store, "ops-agent", 1.0, hourly, true, left)
		refused := expectSpend(t, s.store, "ops-agent", 0.5, hourly, false, left)
		mustRefund(t, s.store, refused)
		mustRefund(t, s.store, BudgetCharge{})
		expectSpend(t, s.store, "ops-agent", 0.1, hourly, false, left)
	})

	t.Run("a refund never takes a window below zero", func(t *testing.T) {
		s := newStore(t)
		ch := expectSpend(t, s.store, "ops-agent", 0.2, hourly, true, left)
		ch.Cost = 0.9 // more than was spent
		mustRefund(t, s.store, ch)
		expectSpend(t, s.store, "ops-agent", 1.0, hourly, true, left)
		expectSpend(t, s.store, "ops-agent", 0.1, hourly, false, left)
	})

	t.Run("a refund after the window ended does not credit the next one", func(t *testing.T) {
		s := newStore(t)
		ch := expectSpend(t, s.store, "ops-agent", 1.0, hourly, true, left)
		s.clock.Advance(left)
		expectSpend(t, s.store, "ops-agent", 1.0, hourly, true, time.Hour)
		mustRefund(t, s.store, ch)
		expectSpend(t, s.store, "ops-agent", 0.1, hourly, false, time.Hour)
	})

	t.Run("invalid settings are an error", func(t *testing.T) {
		s := newStore(t)
		for _, b := range []BudgetSettings{{Cost: 0, Per: time.Hour}, {Cost: -1, Per: time.Hour}, {Cost: 1, Per: 0}, {Cost: 1, Per: time.Microsecond}} {
			if _, err := s.store.Spend(t.Context(), "ops-agent", 0.1, b); !errors.Is(err, errBudgetSettings) {
				t.Errorf("Spend with %+v: %v; want %v", b, err, errBudgetSettings)
			}
		}
	})

	t.Run("concurrent spends never overshoot", func(t *testing.T) {
		s := newStore(t)
		b := BudgetSettings{Cost: 3.7, Per: time.Hour}
		var spent atomic.Int64
		var wg sync.WaitGroup
		for range 100 {
			wg.Go(func() {
				ch, err := s.store.Spend(context.Background(), "ops-agent", 0.1, b)
				if err != nil {
					t.Error(err)
				}
				if ch.OK {
					spent.Add(1)
				}
			})
		}
		wg.Wait()
		if n := spent.Load(); n != 37 {
			t.Fatalf("%d of 100 spends succeeded, want 37", n)
		}
	})
}

func TestMemoryBudgets(t *testing.T) {
	testBudgetConformance(t, func(t *testing.T) budgetTarget {
		clock := newManualClock(budgetT0)
		return budgetTarget{store: NewMemoryBudgets(clock.Now), clock: clock}
	})
}

func TestBudgetWindow(t *testing.T) {
	for _, tc := range []struct {
		name      string
		now       time.Time
		per       time.Duration
		start     time.Time
		remaining time.Duration
	}{
		{"an hour window starts on the hour", time.Unix(3600*10+61, 5), time.Hour, time.Unix(3600*10, 0), time.Hour - 61*time.Second - 5},
		{"a window boundary starts a window", time.Unix(86400, 0), 24 * time.Hour, time.Unix(86400, 0), 24 * time.Hour},
		{"a week window starts at the epoch's weekday", time.Unix(8*86400, 0), 7 * 24 * time.Hour, time.Unix(7*86400, 0), 6 * 24 * time.Hour},
		{"sub-second windows", time.Unix(10, 750_000_000), 500 * time.Millisecond, time.Unix(10, 500_000_000), 250 * time.Millisecond},
		{"before 1970", time.Unix(-10, 0), time.Minute, time.Unix(-60, 0), 10 * time.Second},
		{"time zones do not matter", time.Unix(3600*10+1, 0).In(time.FixedZone("x", 5400)), time.Hour, time.Unix(3600*10, 0), time.Hour - time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start, remaining := budgetWindow(tc.now, tc.per)
			if !start.Equal(tc.start) || remaining != tc.remaining {
				t.Fatalf("budgetWindow = %v, %v; want %v, %v", start, remaining, tc.start, tc.remaining)
			}
		})
	}
}

func TestBudgetUnits(t *testing.T) {
	for cost, want := range map[float64]int64{
		0.1:       100_000,
		3.7:       3_700_000,
		0.001:     1_000,
		0.0000005: 1,
		0.0000004: 0,
		-3:        0,
		1e300:     maxBudgetUnits,
	} {
		if got := budgetUnits(cost); got != want {
			t.Errorf("budgetUnits(%v) = %d, want %d", cost, got, want)
		}
	}
}
