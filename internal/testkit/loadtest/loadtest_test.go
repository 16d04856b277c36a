package loadtest

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestMerge(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		s := make([]time.Duration, len(v))
		for i, x := range v {
			s[i] = time.Duration(x) * time.Millisecond
		}
		return s
	}
	a := Result{Impl: "x", Ops: 2, Seconds: 1, AllocsPerOp: 10, BytesPerOp: 100, Shares: []int{1, 1}, samples: ms(1, 3)}
	b := Result{Impl: "x", Ops: 3, Errors: 1, Seconds: 2, AllocsPerOp: 20, BytesPerOp: 200, Shares: []int{2, 1}, samples: ms(2, 4, 5), FirstError: "boom"}
	m := Merge([]Result{a, b})
	assert.Equal(t, 5, m.Ops)
	assert.Equal(t, 1, m.Errors)
	assert.InDelta(t, 3.0, m.Seconds, 1e-9)
	assert.InDelta(t, 5.0/3, m.PerSec, 1e-9)
	assert.InDelta(t, 16.0, m.AllocsPerOp, 1e-9, "weighted by operations")
	assert.InDelta(t, 160.0, m.BytesPerOp, 1e-9)
	assert.Equal(t, []int{3, 2}, m.Shares)
	assert.Equal(t, "boom", m.FirstError)
	assert.True(t, slices.IsSorted(m.samples))
	assert.Equal(t, 3*time.Millisecond, m.Latency.P50)
	assert.Equal(t, 5*time.Millisecond, m.Latency.Max)
	assert.Equal(t, []int{1, 1}, a.Shares, "the inputs are not changed")
}

// TestHandoffs: the gap from each Unlock call to the next hold's start, and
// a hold that began before the previous one ended counts as an overlap (the
// check of the bench's separate-process scenario).
func TestHandoffs(t *testing.T) {
	gaps, overlaps := handoffs([]Hold{{Obtained: 30, Released: 40}, {Obtained: 0, Released: 10}, {Obtained: 12, Released: 25}})
	assert.Equal(t, []time.Duration{2, 5}, gaps)
	assert.Zero(t, overlaps)

	gaps, overlaps = handoffs([]Hold{{Obtained: 0, Released: 10}, {Obtained: 5, Released: 20}, {Obtained: 15, Released: 30}, {Obtained: 31, Released: 40}})
	assert.Equal(t, 2, overlaps, "5 < 10, and 15 < 20")
	assert.Equal(t, []time.Duration{1}, gaps)
}

// TestRunProcsNeedsSpawn: a scenario of processes needs a Runner that can
// start them.
func TestRunProcsNeedsSpawn(t *testing.T) {
	var r Runner
	_, err := r.Run(t.Context(), Impl{Name: "x"}, Scenario{ID: "p", Callers: 2, Procs: true}, []string{"127.0.0.1:1"})
	assert.ErrorContains(t, err, "has no Spawn")
}
