package chaos

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"
)

// ms builds an attempt from millisecond times.
func ms(key string, client int, call, obtained, end int64, ok bool) Attempt {
	m := int64(time.Millisecond)
	return Attempt{Key: key, Client: client, Call: call * m, Obtained: obtained * m, End: end * m, OK: ok}
}

// TestCheckers shows that both checkers accept the histories of a correct
// lock and reject two holders at once: the checkers themselves can fail.
func TestCheckers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		history []Attempt
		overlap int
	}{
		{"sequential", []Attempt{
			ms("k", 1, 0, 1, 10, true), ms("k", 2, 0, 10, 20, true), ms("k", 1, 15, 21, 30, true),
		}, 0},
		{"failed attempts overlap anything", []Attempt{
			ms("k", 1, 0, 1, 10, true), ms("k", 2, 0, 12, 0, false), ms("k", 3, 5, 11, 20, true), ms("k", 2, 13, 19, 0, false),
		}, 0},
		{"acquire may take effect early in its call", []Attempt{
			// Client 2 called before client 1's hold ended; its acquire
			// takes effect after the release.
			ms("k", 1, 0, 1, 10, true), ms("k", 2, 5, 11, 20, true),
		}, 0},
		{"other keys are independent", []Attempt{
			ms("a", 1, 0, 1, 10, true), ms("b", 2, 0, 2, 9, true),
		}, 0},
		{"overlap", []Attempt{
			ms("k", 1, 0, 1, 10, true), ms("k", 2, 0, 5, 20, true),
		}, 1},
		{"nested", []Attempt{
			ms("k", 1, 0, 1, 100, true), ms("k", 2, 0, 5, 10, true), ms("k", 3, 20, 30, 40, true),
		}, 2},
		{"overlap among many", []Attempt{
			ms("k", 1, 0, 1, 10, true), ms("k", 2, 0, 10, 20, true), ms("k", 3, 0, 19, 30, true), ms("k", 4, 0, 30, 40, true),
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Len(t, CheckOverlaps(tc.history), tc.overlap)
			res, path, err := CheckLinearizable(tc.history, 10*time.Second, t.TempDir())
			require.NoError(t, err)
			want := porcupine.Ok
			if tc.overlap > 0 {
				want = porcupine.Illegal
				require.FileExists(t, path)
			}
			require.Equal(t, want, res)
		})
	}
}
