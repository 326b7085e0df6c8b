package policy

import (
	"testing"
	"time"
)

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
		if got := BudgetUnits(cost); got != want {
			t.Errorf("BudgetUnits(%v) = %d, want %d", cost, got, want)
		}
	}
}
