package alloc

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestWithSlice(t *testing.T) {
	for _, n := range []int{0, 1, Small, Small + 1, 20} {
		v, s := WithSlice[[2]int, int64](n)
		assert.Equal(t, [2]int{}, *v)
		assert.Len(t, s, n)
		assert.Equal(t, n, cap(s), "appending must not run into the rest of the allocation")
		for i := range s {
			assert.Zero(t, s[i])
			s[i] = 1
		}
	}
	assert.Equal(t, 1.0, testing.AllocsPerRun(100, func() { sinkV, sinkS = WithSlice[[2]int, int64](5) }), "one allocation for a small slice")
	assert.Equal(t, 2.0, testing.AllocsPerRun(100, func() { sinkV, sinkS = WithSlice[[2]int, int64](Small + 1) }))
}

// The results escape to these, as a Round's and a Lock's do.
var (
	sinkV *[2]int
	sinkS []int64
)
