//go:build race

package redact

// raceEnabled says the tests run with the race detector, whose
// instrumentation makes every stack frame larger.
const raceEnabled = true
