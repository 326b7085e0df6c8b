package policy_test

import (
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/testkit/statetest"
	"github.com/toolgate/toolgate/policy"
)

// The memory implementations pass the suites every state store passes
// (internal/testkit/statetest); policy/redisstate runs them against Redis.

func TestMemoryStore(t *testing.T) {
	statetest.RunIdempotencyStoreTests(t, func(t *testing.T) statetest.StoreTarget {
		clock := statetest.NewManualClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
		s := policy.NewMemoryStore(policy.MemoryOptions{Now: clock.Now})
		t.Cleanup(func() { _ = s.Close() })
		return statetest.StoreTarget{Store: s, Advance: clock.Advance}
	})
}

func TestMemoryBudgets(t *testing.T) {
	statetest.RunBudgetStoreTests(t, func(t *testing.T) statetest.BudgetTarget {
		clock := statetest.NewManualClock(statetest.BudgetT0)
		return statetest.BudgetTarget{Store: policy.NewMemoryBudgets(clock.Now), Clock: clock}
	})
}
