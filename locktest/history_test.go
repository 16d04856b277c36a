package locktest

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ms builds an attempt from millisecond times.
func ms(key string, client int, call, obtained, end int64, ok bool) Attempt {
	m := int64(time.Millisecond)
	return Attempt{Key: key, Client: client, Call: call * m, Obtained: obtained * m, End: end * m, OK: ok}
}

// fenced returns a with fence f.
func fenced(a Attempt, f uint64) Attempt {
	a.Fence = f
	return a
}

// TestCheckOverlaps shows that the interval check accepts the histories of
// a correct lock and rejects two holders at once.
func TestCheckOverlaps(t *testing.T) {
	for _, tc := range []struct {
		name    string
		history []Attempt
		overlap int
	}{
		{"sequential", []Attempt{ms("k", 1, 0, 1, 10, true), ms("k", 2, 0, 10, 20, true), ms("k", 1, 15, 21, 30, true)}, 0},
		{"failed attempts overlap anything", []Attempt{
			ms("k", 1, 0, 1, 10, true), ms("k", 2, 0, 12, 0, false), ms("k", 3, 5, 11, 20, true), ms("k", 2, 13, 19, 0, false),
		}, 0},
		{"other keys are independent", []Attempt{ms("a", 1, 0, 1, 10, true), ms("b", 2, 0, 2, 9, true)}, 0},
		{"overlap", []Attempt{ms("k", 1, 0, 1, 10, true), ms("k", 2, 0, 5, 20, true)}, 1},
		{"nested", []Attempt{ms("k", 1, 0, 1, 100, true), ms("k", 2, 0, 5, 10, true), ms("k", 3, 20, 30, 40, true)}, 2},
		{"overlap among many", []Attempt{
			ms("k", 1, 0, 1, 10, true), ms("k", 2, 0, 10, 20, true), ms("k", 3, 0, 19, 30, true), ms("k", 4, 0, 30, 40, true),
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Len(t, CheckOverlaps(tc.history), tc.overlap)
		})
	}
}

// shared returns a as a read hold.
func shared(a Attempt) Attempt {
	a.Shared = true
	return a
}

// TestCheckOverlapsShared: readers may overlap each other, a writer may
// overlap nobody, and a hold that ends when another is obtained, or at the
// end of its validity, does not overlap it.
func TestCheckOverlapsShared(t *testing.T) {
	for _, tc := range []struct {
		name    string
		history []Attempt
		bad     []int // clients of the later holds reported
	}{
		{"readers together", []Attempt{shared(ms("k", 1, 0, 1, 10, true)), shared(ms("k", 2, 0, 2, 9, true)), shared(ms("k", 3, 0, 5, 20, true))}, nil},
		{"writer after readers, touching", []Attempt{
			shared(ms("k", 1, 0, 1, 10, true)), shared(ms("k", 2, 0, 2, 9, true)), ms("k", 3, 0, 10, 20, true), shared(ms("k", 4, 0, 20, 30, true)),
		}, nil},
		{"a failed writer among readers", []Attempt{shared(ms("k", 1, 0, 1, 10, true)), ms("k", 2, 0, 5, 0, false)}, nil},
		{"writer while a reader holds", []Attempt{shared(ms("k", 1, 0, 1, 10, true)), ms("k", 2, 0, 9, 20, true)}, []int{2}},
		{"reader while a writer holds", []Attempt{ms("k", 1, 0, 1, 10, true), shared(ms("k", 2, 0, 5, 8, true))}, []int{2}},
		{"reader against the writer, not the reader that ends later", []Attempt{
			ms("k", 1, 0, 1, 10, true), shared(ms("k", 2, 0, 2, 30, true)), shared(ms("k", 3, 0, 5, 6, true)),
		}, []int{2, 3}},
		{"reader after a writer's validity ends", []Attempt{ms("k", 1, 0, 1, 10, true), shared(ms("k", 2, 0, 10, 20, true))}, nil},
		{"writers on other keys", []Attempt{shared(ms("a", 1, 0, 1, 10, true)), ms("b", 2, 0, 2, 9, true)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bad []int
			for _, o := range CheckOverlaps(tc.history) {
				bad = append(bad, o.B.Client)
				assert.True(t, !o.A.Shared || !o.B.Shared, "two readers reported: %v", o)
			}
			assert.Equal(t, tc.bad, bad)
		})
	}
	o := CheckOverlaps([]Attempt{ms("k", 1, 0, 1, 10, true), shared(ms("k", 2, 0, 5, 8, true))})
	require.Len(t, o, 1)
	assert.Contains(t, o[0].String(), "client 2 (shared)")
}

// TestCheckLimit: a semaphore's history may have up to k holders inside
// their validity at any instant, and no more; holds that touch do not
// count together.
func TestCheckLimit(t *testing.T) {
	for _, tc := range []struct {
		name    string
		k       int
		history []Attempt
		excess  []int // of each crowd, in the order of the holds that made them
	}{
		{"k at once", 3, []Attempt{ms("s", 1, 0, 1, 10, true), ms("s", 2, 0, 2, 10, true), ms("s", 3, 0, 3, 10, true)}, nil},
		{"k+1 at once", 3, []Attempt{ms("s", 1, 0, 1, 10, true), ms("s", 2, 0, 2, 10, true), ms("s", 3, 0, 3, 10, true), ms("s", 4, 0, 9, 12, true)}, []int{1}},
		{"touching: one ends as the next is obtained", 2, []Attempt{
			ms("s", 1, 0, 1, 10, true), ms("s", 2, 0, 2, 20, true), ms("s", 3, 0, 10, 30, true), ms("s", 4, 0, 20, 30, true),
		}, nil},
		{"validity ends before the release", 2, []Attempt{
			ms("s", 1, 0, 1, 5, true), ms("s", 2, 0, 2, 20, true), ms("s", 3, 0, 5, 20, true),
		}, nil},
		{"failed attempts do not count", 1, []Attempt{ms("s", 1, 0, 1, 10, true), ms("s", 2, 0, 5, 0, false)}, nil},
		{"keys are independent", 1, []Attempt{ms("a", 1, 0, 1, 10, true), ms("b", 2, 0, 2, 10, true)}, nil},
		{"two crowds, the second larger", 2, []Attempt{
			ms("s", 1, 0, 1, 100, true), ms("s", 2, 0, 2, 100, true), ms("s", 3, 0, 3, 4, true), ms("s", 4, 0, 50, 60, true), ms("s", 5, 0, 55, 60, true),
		}, []int{1, 1, 2}},
		{"readers count too", 1, []Attempt{shared(ms("s", 1, 0, 1, 10, true)), shared(ms("s", 2, 0, 2, 10, true))}, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var excess []int
			for _, c := range CheckLimit(tc.history, tc.k) {
				excess = append(excess, c.Excess())
				assert.Equal(t, tc.k, c.Limit)
				last := c.Holds[len(c.Holds)-1]
				for _, a := range c.Holds {
					assert.True(t, a.Obtained <= last.Obtained && a.End > last.Obtained, "%v is not inside its validity when %v is obtained", a, last)
				}
			}
			assert.Equal(t, tc.excess, excess)
		})
	}
	c := CheckLimit([]Attempt{ms("s", 1, 0, 1, 10, true), ms("s", 2, 0, 2, 10, true)}, 1)
	require.Len(t, c, 1)
	assert.Contains(t, c[0].String(), `key "s": 2 holders at once, limit 1, when client 2 obtained`)
}

// TestCheckLimitOneIsCheckOverlaps: with one permit, the crowds are the
// overlaps of a lock's history, hold for hold.
func TestCheckLimitOneIsCheckOverlaps(t *testing.T) {
	h := []Attempt{
		ms("k", 1, 0, 1, 100, true), ms("k", 2, 0, 5, 10, true), ms("k", 3, 0, 10, 40, true), ms("k", 4, 0, 100, 110, true),
		ms("k", 5, 0, 105, 106, true), ms("j", 6, 0, 1, 2, true), ms("k", 7, 0, 120, 130, true),
	}
	var overlaps, crowds []int
	for _, o := range CheckOverlaps(h) {
		overlaps = append(overlaps, o.B.Client)
	}
	for _, c := range CheckLimit(h, 1) {
		crowds = append(crowds, c.Holds[len(c.Holds)-1].Client)
	}
	assert.Equal(t, []int{2, 3, 5}, overlaps)
	assert.Equal(t, overlaps, crowds)
}

func TestCheckFences(t *testing.T) {
	for _, tc := range []struct {
		name    string
		history []Attempt
		bad     []int // clients of the regressing holds
	}{
		{"increasing", []Attempt{fenced(ms("k", 1, 0, 1, 10, true), 1), fenced(ms("k", 2, 0, 11, 20, true), 2)}, nil},
		{"gaps are fine", []Attempt{fenced(ms("k", 1, 0, 1, 10, true), 5), fenced(ms("k", 2, 0, 11, 20, true), 9)}, nil},
		{"backwards", []Attempt{fenced(ms("k", 1, 0, 1, 10, true), 5), fenced(ms("k", 2, 0, 11, 20, true), 4)}, []int{2}},
		{"repeated", []Attempt{fenced(ms("k", 1, 0, 1, 10, true), 5), fenced(ms("k", 2, 0, 11, 20, true), 5)}, []int{2}},
		{"against the highest ended before", []Attempt{
			fenced(ms("k", 1, 0, 1, 10, true), 7), fenced(ms("k", 2, 0, 11, 20, true), 8), fenced(ms("k", 3, 0, 21, 30, true), 6),
		}, []int{3}},
		{"overlapping holds are the overlap check's", []Attempt{
			fenced(ms("k", 1, 0, 1, 10, true), 7), fenced(ms("k", 2, 0, 5, 20, true), 3),
		}, nil},
		{"unfenced and other keys are left out", []Attempt{
			fenced(ms("k", 1, 0, 1, 10, true), 7), ms("k", 2, 0, 11, 20, true), fenced(ms("j", 3, 0, 21, 30, true), 1),
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bad []int
			for _, f := range CheckFences(tc.history) {
				bad = append(bad, f.After.Client)
			}
			assert.Equal(t, tc.bad, bad)
		})
	}
}

// TestRecorder: spans record failures at once and holds at their end, cut
// at the validity end.
func TestRecorder(t *testing.T) {
	var r Recorder
	r.Start(1, "k").Failed()
	s := r.Start(2, "k")
	s.Obtained(42)
	require.Len(t, r.History(), 1, "a hold is recorded when it ends")
	past := time.Now().Add(-time.Hour)
	s.End(past)
	r.StartShared(3, "k").Failed()
	h := r.History()
	require.Len(t, h, 3)
	assert.True(t, h[2].Shared)
	assert.False(t, h[0].OK)
	assert.True(t, h[1].OK)
	assert.Equal(t, uint64(42), h[1].Fence)
	assert.Equal(t, h[1].Obtained, h[1].End, "a hold past its validity ends when obtained, no earlier")
}

// TestTimeline: a report with an overlap draws it in red and names both
// clients and the faulted node.
func TestTimeline(t *testing.T) {
	h := []Attempt{ms("k", 1, 0, 1, 10, true), ms("k", 2, 0, 5, 20, true), ms("k", 3, 0, 6, 0, false)}
	faults := []Fault{{Node: 0, Name: "node0", Kind: Pause, Start: 2e6, End: 8e6}}
	r := Check(h, faults)
	require.False(t, r.OK())
	path := t.TempDir() + "/t.svg"
	require.NoError(t, r.WriteTimeline(path))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	svg := string(b)
	for _, want := range []string{"<svg", "client 1", "client 2", "client 3", "node0", `fill="red"`, "overlaps=1", "pause=1"} {
		assert.Contains(t, svg, want)
	}
	assert.True(t, strings.HasSuffix(strings.TrimSpace(svg), "</svg>"))
}

// TestVerifyNamesTheTimeline: a failing Verify names a timeline file that
// exists once the test is over.
func TestVerifyNamesTheTimeline(t *testing.T) {
	t.Setenv("LOCKTEST_DIR", t.TempDir())
	ft := &fakeT{TB: t}
	Verify(ft, []Attempt{ms("k", 1, 0, 1, 10, true), ms("k", 2, 0, 5, 20, true)}, nil)
	require.Len(t, ft.errors, 1)
	_, path, ok := strings.Cut(ft.errors[0], "timeline: ")
	require.True(t, ok, ft.errors[0])
	assert.FileExists(t, path)
	ft.errors = nil
	Verify(ft, []Attempt{ms("k", 1, 0, 1, 10, true)}, nil)
	assert.Empty(t, ft.errors)
}

// TestVerifySemaphore: a semaphore's report counts its crowds, draws them
// and fails the test.
func TestVerifySemaphore(t *testing.T) {
	t.Setenv("LOCKTEST_DIR", t.TempDir())
	ft := &fakeT{TB: t}
	h := []Attempt{ms("s", 1, 0, 1, 10, true), ms("s", 2, 0, 2, 10, true), ms("s", 3, 0, 3, 10, true)}
	r := VerifySemaphore(ft, h, nil, 2)
	require.Len(t, ft.errors, 1)
	assert.Contains(t, ft.errors[0], "violations: over 2 holders=1")
	assert.Contains(t, ft.errors[0], "3 holders at once, limit 2")
	_, path, _ := strings.Cut(ft.errors[0], "timeline: ")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(b), "crowd: ")
	assert.Empty(t, r.Overlaps, "a semaphore's holds are not a lock's")
	ft.errors = nil
	VerifySemaphore(ft, h, nil, 3)
	assert.Empty(t, ft.errors)
}

// fakeT records Errorf instead of failing.
type fakeT struct {
	testing.TB
	errors []string
}

func (f *fakeT) Errorf(format string, args ...any) {
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}
