// Package leakcheck fails a test whose goroutines outlive it.
package leakcheck

import (
	"runtime"
	"testing"
	"time"
)

// Check records the goroutines running now and, when the test ends, fails it
// if more are running after a grace period of up to two seconds (goroutines of
// the runtime and of network pollers need a moment to wind down). Do not use it
// in parallel tests.
func Check(t testing.TB) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(2 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("leakcheck: %d goroutines running, %d before the test:\n%s", n, before, trim(string(buf)))
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

func trim(s string) string {
	if len(s) > 8000 {
		return s[:8000] + "\n…"
	}
	return s
}
