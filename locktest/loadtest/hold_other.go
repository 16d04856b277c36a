//go:build !linux

package loadtest

import "time"

// holdFor keeps a lock for sc.Hold. HoldBlocking needs Linux's nanosleep
// (see hold_linux.go), so elsewhere a holder sleeps.
func holdFor(sc Scenario) { time.Sleep(sc.Hold) }
