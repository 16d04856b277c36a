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
	h := r.History()
	require.Len(t, h, 2)
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

// fakeT records Errorf instead of failing.
type fakeT struct {
	testing.TB
	errors []string
}

func (f *fakeT) Errorf(format string, args ...any) {
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}
