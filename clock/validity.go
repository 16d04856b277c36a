package clock

import (
	"fmt"
	"time"
)

// DriftConstant is the fixed part of the clock-drift allowance: the Redlock
// paper's 2 ms, which covers the millisecond granularity of Redis expiry.
const DriftConstant = 2 * time.Millisecond

// Drift returns the time a lock of the given ttl must give up for clock drift
// between the client and the nodes: ttl·factor + [DriftConstant].
//
// It assumes that no clock involved runs faster or slower than another by more
// than factor (0.01 means 1%) over one ttl.
func Drift(ttl time.Duration, factor float64) time.Duration {
	return time.Duration(float64(ttl)*factor) + DriftConstant
}

// Validity returns how long a lock obtained in a round that took elapsed may
// still be trusted: ttl − elapsed − Drift(ttl, factor). A result ≤ 0 means the
// lock was not obtained in time and must be released.
func Validity(ttl, elapsed time.Duration, factor float64) time.Duration {
	return ttl - elapsed - Drift(ttl, factor)
}

// CheckDriftFactor reports an error naming factor unless 0 ≤ factor < 0.5.
func CheckDriftFactor(factor float64) error {
	if !(factor >= 0 && factor < 0.5) { // also rejects NaN
		return fmt.Errorf("clock: drift factor %v is outside [0, 0.5)", factor)
	}
	return nil
}

// CheckTTL reports an error naming ttl when it is not positive or when drift
// alone would consume it, so that no round could ever produce a valid lock.
func CheckTTL(ttl time.Duration, factor float64) error {
	if ttl <= 0 {
		return fmt.Errorf("clock: ttl %v is not positive", ttl)
	}
	if d := Drift(ttl, factor); Validity(ttl, 0, factor) <= 0 {
		return fmt.Errorf("clock: ttl %v is too small: drift allowance %v leaves no validity", ttl, d)
	}
	return nil
}
