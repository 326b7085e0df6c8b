package config

import (
	"testing"

	"go.uber.org/goleak"
)

// The watcher starts goroutines; none may outlive its test.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
