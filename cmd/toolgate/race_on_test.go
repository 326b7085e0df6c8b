//go:build race

package main

// raceEnabled says the tests run with the race detector; binaries they
// build get it too.
const raceEnabled = true
