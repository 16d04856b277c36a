package clock

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestValidity(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ttl     time.Duration
		elapsed time.Duration
		factor  float64
		want    time.Duration
	}{
		{"no drift, instant round", 10 * time.Second, 0, 0, 10*time.Second - 2*time.Millisecond},
		{"default drift", 10 * time.Second, 5 * time.Millisecond, 0.01, 10*time.Second - 5*time.Millisecond - 100*time.Millisecond - 2*time.Millisecond},
		{"+2ms constant alone", 3 * time.Millisecond, 0, 0, time.Millisecond},
		{"elapsed eats the ttl", 100 * time.Millisecond, 99 * time.Millisecond, 0.01, -2 * time.Millisecond},
		{"elapsed exactly reaches the margin", 100 * time.Millisecond, 97 * time.Millisecond, 0.01, 0},
		{"elapsed beyond ttl", time.Second, 2 * time.Second, 0.01, -time.Second - 12*time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Validity(tc.ttl, tc.elapsed, tc.factor))
			assert.Equal(t, tc.ttl-tc.elapsed-tc.want, Drift(tc.ttl, tc.factor))
		})
	}
}

func TestCheckDriftFactor(t *testing.T) {
	for _, f := range []float64{0, 0.01, 0.49} {
		assert.NoError(t, CheckDriftFactor(f), "%v", f)
	}
	for _, f := range []float64{-0.01, 0.5, 1, math.NaN(), math.Inf(1)} {
		err := CheckDriftFactor(f)
		require.Error(t, err, "%v", f)
		assert.Contains(t, err.Error(), "drift factor")
	}
}

func TestCheckTTL(t *testing.T) {
	assert.NoError(t, CheckTTL(3*time.Millisecond, 0))
	for _, tc := range []struct {
		ttl    time.Duration
		factor float64
		msg    string
	}{
		{0, 0.01, "ttl 0s is not positive"},
		{-time.Second, 0.01, "ttl -1s is not positive"},
		{2 * time.Millisecond, 0, "ttl 2ms is too small"},
		{2 * time.Millisecond, 0.01, "ttl 2ms is too small"},
	} {
		err := CheckTTL(tc.ttl, tc.factor)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.msg)
	}
}

func TestFake(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := NewFake(start)
	now := <-f.After(0)
	assert.Equal(t, start, now, "After(0) fires at once")

	a := f.After(10 * time.Millisecond)
	b := f.After(20 * time.Millisecond)
	assert.Equal(t, 2, f.Waiters())
	assert.True(t, f.WaitingFor(20*time.Millisecond))
	assert.False(t, f.WaitingFor(15*time.Millisecond))
	f.Advance(9 * time.Millisecond)
	select {
	case <-a:
		t.Fatal("fired early")
	default:
	}
	f.Advance(time.Millisecond)
	assert.Equal(t, start.Add(10*time.Millisecond), <-a)
	assert.Equal(t, 1, f.Waiters())
	f.Advance(time.Hour)
	assert.Equal(t, start.Add(time.Hour+10*time.Millisecond), <-b)
	assert.Equal(t, start.Add(time.Hour+10*time.Millisecond), f.Now())
	assert.Equal(t, 0, f.Waiters())
}

func TestRealIsMonotonic(t *testing.T) {
	a := Real{}.Now()
	// A monotonic reading survives as the "m=" part of String.
	assert.Contains(t, a.String(), "m=")
	assert.GreaterOrEqual(t, Real{}.Now().Sub(a), time.Duration(0))
}
