package retry

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestToken(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		tok := Token()
		assert.Len(t, tok, 22)
		assert.False(t, seen[tok], "token repeated: %s", tok)
		seen[tok] = true
	}
}

func TestDelayBounds(t *testing.T) {
	lo, hi := 5*time.Millisecond, 100*time.Millisecond
	for _, tc := range []struct {
		attempt int
		cap     time.Duration
	}{{0, lo}, {1, 10 * time.Millisecond}, {2, 20 * time.Millisecond}, {4, 80 * time.Millisecond}, {5, hi}, {60, hi}} {
		var maxSeen time.Duration
		for range 2000 {
			d := Delay(tc.attempt, lo, hi)
			assert.GreaterOrEqual(t, d, lo)
			assert.LessOrEqual(t, d, tc.cap)
			maxSeen = max(maxSeen, d)
		}
		if tc.cap > lo {
			// Jitter spreads: over 2000 draws the top quarter of the range is reached.
			assert.Greater(t, maxSeen, lo+(tc.cap-lo)*3/4, "attempt %d", tc.attempt)
		}
	}
}

func TestJitter(t *testing.T) {
	assert.Equal(t, time.Duration(0), Jitter(0))
	assert.Equal(t, time.Duration(0), Jitter(-time.Second))
	distinct := map[time.Duration]bool{}
	for range 100 {
		d := Jitter(time.Second)
		assert.GreaterOrEqual(t, d, time.Duration(0))
		assert.LessOrEqual(t, d, time.Second)
		distinct[d] = true
	}
	assert.Greater(t, len(distinct), 50)
}
