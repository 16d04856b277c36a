// Package retry makes lock tokens and the jittered delays between lock rounds.
package retry

import (
	crand "crypto/rand"
	"encoding/base64"
	"math/rand/v2"
	"time"
)

// Token returns 128 random bits from crypto/rand as 22 characters of
// unpadded URL-safe base64.
func Token() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read never fails (it crashes the program instead)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// Delay returns how long to wait before round attempt+1 (attempt counts from
// 0): a uniformly random duration in [lo, cap], where cap doubles from lo with
// each attempt up to hi. The randomness keeps competing clients, also in
// separate processes, from retrying in step. It requires 0 < lo ≤ hi.
func Delay(attempt int, lo, hi time.Duration) time.Duration {
	c := lo
	for i := 0; i < attempt && c < hi; i++ {
		c *= 2
	}
	c = min(c, hi)
	return lo + rand.N(c-lo+1)
}

// Jitter returns a uniformly random duration in [0, d]; 0 when d ≤ 0.
func Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return rand.N(d + 1)
}
