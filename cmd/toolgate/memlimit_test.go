package main

import (
	"errors"
	"math"
	"os"
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// TestTuneMemory: the Go runtime's memory limit is 90 % of the
// container's, unlimited without one, and left alone when GOMEMLIMIT is
// set, AUTOMEMLIMIT is off or the cgroup cannot be read.
func TestTuneMemory(t *testing.T) {
	const before = 123 << 20 // the limit in force when tuneMemory runs
	fails := func() (uint64, error) { return 0, errors.New("no cgroup here") }
	noLimit := func() (uint64, error) { return 0, memlimit.ErrNoLimit }
	for _, c := range []struct {
		name     string
		env      map[string]string
		provider memlimit.Provider
		want     int64
	}{
		{"a 256 MiB container", nil, memlimit.Limit(256 << 20), 256 << 20 * 9 / 10},
		{"a 1 GiB container", nil, memlimit.Limit(1 << 30), 1 << 30 * 9 / 10},
		{"no limit", nil, noLimit, math.MaxInt64},
		{"an unreadable cgroup", nil, fails, before},
		{"GOMEMLIMIT wins", map[string]string{"GOMEMLIMIT": "100MiB"}, memlimit.Limit(256 << 20), before},
		{"AUTOMEMLIMIT=off", map[string]string{"AUTOMEMLIMIT": "off"}, memlimit.Limit(256 << 20), before},
		{"AUTOMEMLIMIT sets the ratio", map[string]string{"AUTOMEMLIMIT": "0.5"}, memlimit.Limit(256 << 20), 128 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("GOMEMLIMIT", "")
			t.Setenv("AUTOMEMLIMIT", "")
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			if c.env["AUTOMEMLIMIT"] == "" {
				os.Unsetenv("AUTOMEMLIMIT") // t.Setenv above restores it
			}
			prev := debug.SetMemoryLimit(before)
			t.Cleanup(func() { debug.SetMemoryLimit(prev) })
			if got := tuneMemory(c.provider); got != c.want {
				t.Errorf("limit %d, want %d", got, c.want)
			}
			if got := debug.SetMemoryLimit(-1); got != c.want {
				t.Errorf("the runtime's limit is %d, want %d", got, c.want)
			}
		})
	}
}
