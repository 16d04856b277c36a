package linearize

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/locktest"
)

// ms builds an attempt from millisecond times.
func ms(key string, client int, call, obtained, end int64, ok bool) locktest.Attempt {
	m := int64(time.Millisecond)
	return locktest.Attempt{Key: key, Client: client, Call: call * m, Obtained: obtained * m, End: end * m, OK: ok}
}

// verdict checks a check's result: Ok when legal, else Illegal with a
// visualization written.
func verdict(t *testing.T, legal bool, res porcupine.CheckResult, path string, err error) {
	t.Helper()
	require.NoError(t, err)
	if legal {
		require.Equal(t, porcupine.Ok, res)
		return
	}
	require.Equal(t, porcupine.Illegal, res, Verdict(res))
	require.FileExists(t, path)
}

// TestCheckLock shows that the lock check accepts the histories of a
// correct lock and rejects two holders at once, with a visualization.
func TestCheckLock(t *testing.T) {
	for _, tc := range []struct {
		name    string
		history []locktest.Attempt
		legal   bool
	}{
		{"sequential", []locktest.Attempt{ms("k", 1, 0, 1, 10, true), ms("k", 2, 0, 10, 20, true), ms("k", 1, 15, 21, 30, true)}, true},
		{"failed attempts overlap anything", []locktest.Attempt{
			ms("k", 1, 0, 1, 10, true), ms("k", 2, 0, 12, 0, false), ms("k", 3, 5, 11, 20, true), ms("k", 2, 13, 19, 0, false),
		}, true},
		// Client 2 called before client 1's hold ended; its acquire takes
		// effect after the release.
		{"acquire may take effect early in its call", []locktest.Attempt{ms("k", 1, 0, 1, 10, true), ms("k", 2, 5, 11, 20, true)}, true},
		{"other keys are independent", []locktest.Attempt{ms("a", 1, 0, 1, 10, true), ms("b", 2, 0, 2, 9, true)}, true},
		{"overlap", []locktest.Attempt{ms("k", 1, 0, 1, 10, true), ms("k", 2, 0, 5, 20, true)}, false},
		{"nested", []locktest.Attempt{ms("k", 1, 0, 1, 100, true), ms("k", 2, 0, 5, 10, true), ms("k", 3, 20, 30, 40, true)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, path, err := CheckLock(tc.history, 10*time.Second, t.TempDir())
			verdict(t, tc.legal, res, path, err)
		})
	}
}

// op builds an operation from millisecond times.
func op(obj string, client int, call, ret int64, k Kind, v int64) Op {
	m := int64(time.Millisecond)
	return Op{Object: obj, Client: client, Call: call * m, Return: ret * m, Kind: k, Value: v}
}

func TestCheckObject(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ops   []Op
		legal bool
	}{
		{"counter in order", []Op{op("c", 1, 0, 1, Incr, 1), op("c", 2, 2, 3, Incr, 2), op("c", 1, 4, 5, Read, 2)}, true},
		{"concurrent increments in either order", []Op{op("c", 1, 0, 10, Incr, 2), op("c", 2, 0, 10, Incr, 1)}, true},
		{"lost update", []Op{op("c", 1, 0, 10, Incr, 1), op("c", 2, 0, 10, Incr, 1)}, false},
		{"stale read", []Op{op("c", 1, 0, 1, Incr, 1), op("c", 2, 2, 3, Read, 0)}, false},
		{"register", []Op{op("r", 1, 0, 1, Write, 7), op("r", 2, 2, 3, Read, 7), op("r", 1, 4, 5, Write, 3)}, true},
		{"objects are independent", []Op{op("a", 1, 0, 1, Incr, 1), op("b", 2, 0, 1, Incr, 1)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, path, err := CheckObject(tc.ops, 0, 10*time.Second, t.TempDir())
			verdict(t, tc.legal, res, path, err)
		})
	}
}

// TestRecorder: an operation is recorded when it is done, over its call.
func TestRecorder(t *testing.T) {
	var r Recorder
	c := r.Start(1, "c")
	require.Empty(t, r.Ops())
	c.Done(Incr, 1)
	ops := r.Ops()
	require.Len(t, ops, 1)
	require.LessOrEqual(t, ops[0].Call, ops[0].Return)
	require.Equal(t, Op{Object: "c", Client: 1, Call: ops[0].Call, Return: ops[0].Return, Kind: Incr, Value: 1}, ops[0])
}
