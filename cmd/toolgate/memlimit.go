package main

import (
	"runtime/debug"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// memoryLimitRatio is the share of the container's memory limit the Go
// runtime is told to keep the process under (its soft limit, GOMEMLIMIT),
// leaving the rest for what the runtime does not count (the binary's
// pages, fragmentation) before the kernel's limit kills the process.
const memoryLimitRatio = 0.9

// tuneMemory sets the Go runtime's memory limit from the memory limit of
// the process's cgroup (v2 memory.max, v1 memory.limit_in_bytes, the
// lowest on the way to the root), times memoryLimitRatio, as automemlimit
// does; an explicit GOMEMLIMIT wins, AUTOMEMLIMIT=off leaves the limit
// alone and AUTOMEMLIMIT=0.8 changes the ratio. Without a limit (no cgroup,
// or none set) the runtime's limit stays unlimited. It returns the limit
// in force; go_gc_gomemlimit_bytes shows it on /metrics.
func tuneMemory(limit memlimit.Provider) int64 {
	// An error (not in a cgroup, or an unreadable one) leaves the limit
	// as it was: unlimited unless GOMEMLIMIT says otherwise.
	_, _ = memlimit.Set(memlimit.WithRatio(memoryLimitRatio), memlimit.WithProvider(limit))
	return debug.SetMemoryLimit(-1)
}

// releaseLoadGarbage collects the garbage of compiling a policy and
// returns its pages to the operating system, after the first load and
// after each reload. Compiling a large policy makes several times its
// live size in short-lived values (decoded YAML, the schema library's
// work); with the GC target of 400 they would otherwise stay
// in the process's RSS until the heap grew that much again
// (docs/performance.md).
func releaseLoadGarbage() { debug.FreeOSMemory() }
