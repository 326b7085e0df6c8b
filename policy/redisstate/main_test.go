package redisstate

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test of the package leaves a goroutine behind:
// the stores withdraw claims and charges in the background.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
