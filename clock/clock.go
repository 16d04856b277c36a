package clock

import (
	"sync"
	"time"
)

// Clock is a source of time. Implementations must be safe for concurrent use.
type Clock interface {
	// Now returns the current time. Intervals between two readings must be
	// measured on a monotonic clock (Go's time.Now does so).
	Now() time.Time
	// After returns a channel that receives the time once d has elapsed.
	After(d time.Duration) <-chan time.Time
}

// Real is the Clock backed by package time. Its zero value is ready to use.
type Real struct{}

// Now returns time.Now(), which carries a monotonic reading.
func (Real) Now() time.Time { return time.Now() }

// After is time.After.
func (Real) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Fake is a Clock that moves only when told to. It is safe for concurrent use.
// Its zero value starts at the zero time; use [NewFake] to start elsewhere.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// NewFake returns a Fake clock that reads start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// After returns a channel that receives once the clock has been advanced by at
// least d. A d ≤ 0 fires at once.
func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- f.now
		return ch
	}
	f.waiters = append(f.waiters, waiter{at: f.now.Add(d), ch: ch})
	return ch
}

// Advance moves the clock forward by d and fires every After whose time has come.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if w.at.After(f.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- f.now
	}
	f.waiters = kept
}

// WaitingFor reports whether an After is pending that fires exactly when the
// clock has moved forward by d from now. Tests use it to wait until the code
// under test sleeps for a particular delay.
func (f *Fake) WaitingFor(d time.Duration) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	at := f.now.Add(d)
	for _, w := range f.waiters {
		if w.at.Equal(at) {
			return true
		}
	}
	return false
}

// Waiters reports how many After channels have not fired yet. Tests use it to
// wait until the code under test is blocked on the clock.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}
