// Package soak holds toolgate's fault-injection soak test (soak_test.go): 64
// careful agents call a read-only and two side-effecting tools through the
// real HTTP front while a fault-injecting backend (examples.FaultBackend)
// misbehaves on a seeded schedule, and every envelope is checked against the
// fault the backend really injected.
//
// `make test` runs it for 20 seconds; `make soak` for 10 minutes
// (-soak.duration=10m). The package has no code outside its test.
package soak
