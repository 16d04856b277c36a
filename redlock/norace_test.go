//go:build !race

package redlock

// raceEnabled reports whether the race detector is on; it adds allocations
// of its own.
const raceEnabled = false
