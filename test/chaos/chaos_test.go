package chaos

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestChaos is the main suite: two processes of four contenders each lock
// eight keys until 10,000 acquisitions have succeeded, while every kind of
// fault hits a minority of the five lock nodes. No checker may find two
// holders at once, and no lock key may outlive its TTL.
func TestChaos(t *testing.T) {
	r := Run(t, Options{Faults: AllFaults, MinDuration: 20 * time.Second})
	assert.GreaterOrEqual(t, r.Acquisitions, 10000, "successful acquisitions under faults")
	require.Len(t, r.ByProc, 2)
	assert.Positive(t, r.ByProc[1], "acquisitions by the second OS process")
	assert.Empty(t, r.Overlaps, "holds that overlap")
	assert.Equal(t, porcupine.Ok, r.Linearizable, "porcupine's verdict; visualization: %s", r.Visualization)
	assert.Zero(t, r.Oversold, "sold + left − initial stock")
	assert.GreaterOrEqual(t, r.MinStock, int64(0))
	assert.Empty(t, r.Leftover, "lock keys left after their TTL")
	for _, k := range AllFaults {
		assert.Positive(t, r.Faults[k], "faults of kind %s", k)
	}
}

// TestNegativeControl runs the suite misconfigured: the two processes are
// split so that each sees its own three of the five nodes, and each has a
// Client over only those three (OwnNodes), with the default quorum of 2 of 3.
// Every setting passes redlock's validation, but the two node lists have
// disjoint majorities, so each process can gather its quorum alone. Both
// checkers, and the oversell scenario, must report the resulting double
// holds.
func TestNegativeControl(t *testing.T) {
	r := Run(t, Options{Target: 1000, MaxDuration: time.Minute, Split: true, OwnNodes: true})
	require.GreaterOrEqual(t, r.Acquisitions, 1000)
	assert.NotEmpty(t, r.Overlaps, "the interval check must find the overlaps")
	assert.Equal(t, porcupine.Illegal, r.Linearizable, "porcupine must reject the history")
	assert.Positive(t, r.Oversold, "the oversell scenario must show more sold than stocked")
	assert.Empty(t, r.Leftover, "lock keys left after their TTL")
}

// TestRestartGuardChaos restarts a node without its data inside holds. The
// two processes see different majorities that share only node 2 (Split), the
// only fault kills node 2 and starts it again at once, empty, and holds last
// up to 3s, mostly longer than a restart. With the restart guard off, the
// restarted node forgets the lock of the process holding it and grants it to
// the other process, which then holds a majority too: both checkers must
// report it (the negative control). With the guard on, the restarted node
// refuses until the guard has passed, and no checker finds anything.
func TestRestartGuardChaos(t *testing.T) {
	base := Options{
		Split: true, Keys: 2, TTL: 6 * time.Second, Hold: 3 * time.Second,
		Faults: []FaultKind{Kill}, FaultNodes: []int{2}, MaxFaulty: 1, KillDowntime: -1,
		Target: 1 << 30, MaxDuration: 30 * time.Second, // a timed run: the target is never met
	}
	t.Run("GuardOff", func(t *testing.T) {
		o := base
		o.FaultGap = 2 * time.Second
		o.Client.UnsafeNoRestartGuard = true
		r := Run(t, o)
		require.Positive(t, r.Faults[Kill], "node 2 was restarted")
		assert.NotEmpty(t, r.Overlaps, "the interval check must find the double hold")
		assert.Equal(t, porcupine.Illegal, r.Linearizable, "porcupine must reject the history")
	})
	t.Run("GuardOn", func(t *testing.T) {
		o := base
		o.FaultGap = 10 * time.Second // the guard keeps node 2 out for a TTL after each restart
		o.Client.RestartGuard = o.TTL // the shortest guard the TTL allows
		r := Run(t, o)
		require.Positive(t, r.Faults[Kill], "node 2 was restarted")
		assert.Positive(t, r.Acquisitions)
		assert.Empty(t, r.Overlaps, "holds that overlap")
		assert.Equal(t, porcupine.Ok, r.Linearizable, "porcupine's verdict; visualization: %s", r.Visualization)
		assert.Zero(t, r.Oversold, "sold + left − initial stock")
	})
}
