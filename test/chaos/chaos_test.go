package chaos

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/redlock"
)

// TestChaos is the main suite: two processes of four contenders each lock
// eight keys until 10,000 acquisitions have succeeded, while every kind of
// fault hits a minority of the five lock nodes. The first process waits
// with WaitDefault, the second with WaitInLine. No checker may find two
// holders at once, and no lock key may outlive its TTL.
func TestChaos(t *testing.T) {
	r := Run(t, Options{
		Faults: AllFaults, MinDuration: 20 * time.Second,
		Waiting: []redlock.Waiting{redlock.WaitDefault, redlock.WaitInLine},
	})
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

// TestChaosHotKey is the hot-key phase across processes: four OS
// processes of one contender each lock one key, so that the lock always
// passes from one process to another, while every kind of fault hits a
// minority of the nodes. The deployment is mixed: process 0 waits with WaitHandoff, 1
// with WaitInLine, 2 with WaitBackoff, and 3 runs the previous release
// (previousRelease) with its default options, as during a rolling deploy.
// Safety must not depend on how a Client waits or on its release.
func TestChaosHotKey(t *testing.T) {
	r := Run(t, Options{
		Procs: 4, Workers: 1, Keys: 1, Faults: AllFaults, Target: 500, MinDuration: 15 * time.Second,
		Waiting:  []redlock.Waiting{redlock.WaitHandoff, redlock.WaitInLine, redlock.WaitBackoff, redlock.WaitDefault},
		Previous: []int{3},
	})
	assert.GreaterOrEqual(t, r.Acquisitions, 500, "successful acquisitions under faults")
	require.Len(t, r.ByProc, 4)
	for p, n := range r.ByProc {
		assert.Positive(t, n, "acquisitions by process %d", p)
	}
	assert.Empty(t, r.Overlaps, "holds that overlap")
	assert.Equal(t, porcupine.Ok, r.Linearizable, "porcupine's verdict; visualization: %s", r.Visualization)
	assert.Zero(t, r.Oversold, "sold + left − initial stock")
	assert.Empty(t, r.Leftover, "lock keys left after their TTL")
}

// TestChaosReplicated is the main suite on a replicated deployment: every
// lock node has a replica, and failovers to a replica that lacks the latest
// locks join the other faults on a minority of the nodes. The connection
// check starts the restart guard on a promoted replica, so no checker may
// find two holders at once, and no lock key may be left on a master or a
// replica.
func TestChaosReplicated(t *testing.T) {
	r := Run(t, Options{Replicated: true, Faults: ReplicatedFaults, Target: 2000, MinDuration: 25 * time.Second})
	assert.GreaterOrEqual(t, r.Acquisitions, 2000, "successful acquisitions under faults")
	require.Len(t, r.ByProc, 2)
	assert.Positive(t, r.ByProc[1], "acquisitions by the second OS process")
	assert.Empty(t, r.Overlaps, "holds that overlap")
	assert.Equal(t, porcupine.Ok, r.Linearizable, "porcupine's verdict; visualization: %s", r.Visualization)
	assert.Zero(t, r.Oversold, "sold + left − initial stock")
	assert.GreaterOrEqual(t, r.MinStock, int64(0))
	assert.Empty(t, r.Leftover, "lock keys left after their TTL")
	// A run injects a few dozen faults, and the schedule deals each kind
	// once in every six, so failovers and the other kinds all happen.
	assert.Positive(t, r.Faults[Failover], "failovers")
	others := 0
	for _, k := range AllFaults {
		others += r.Faults[k]
	}
	assert.Positive(t, others, "faults other than failovers")
}

// TestNegativeControl runs the suite misconfigured: the two processes are
// split so that each sees its own three of the five nodes, and each has a
// Client over only those three (OwnNodes), with the default quorum of 2 of 3.
// Every setting passes redlock's validation, but the two node lists have
// disjoint majorities, so each process can gather its quorum alone. Both
// checkers, and the oversell scenario, must report the resulting double
// holds. The run lasts at least 3 s: the process whose first round reaches
// the shared node 2 after the other's finds only its own two nodes new,
// and waits out their restart guard (twice the TTL) before it locks; a
// short run could end with the other alone.
func TestNegativeControl(t *testing.T) {
	r := Run(t, Options{Target: 1000, MinDuration: 3 * time.Second, MaxDuration: time.Minute, Split: true, OwnNodes: true})
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
	guardPair(t, base, Kill, "node 2 was restarted",
		2*time.Second,  // with the guard off
		10*time.Second) // with it on: the guard keeps node 2 out for a TTL after each restart
}

// guardPair runs base, whose only fault is kind on node 2, with the restart
// guard off and on, faults apart by gapOff and gapOn. With the guard off,
// both checkers must report the double holds (the negative control); with
// it on (as short as the TTL allows), neither may. The two runs are timed
// and mostly wait (a hold lasts seconds), so they run at once, each on its
// own rig; the leak check covers the pair.
func guardPair(t *testing.T, base Options, kind FaultKind, what string, gapOff, gapOn time.Duration) {
	leakcheck.Check(t)
	base.parallel = true
	t.Run("GuardOff", func(t *testing.T) {
		t.Parallel()
		o := base
		o.FaultGap = gapOff
		o.Client.UnsafeNoRestartGuard = true
		// Waiters retry within MaxRetryDelay, not at up to a quarter of the
		// TTL as in a handoff's line: a waiter then tries the restarted node
		// before the holder's hold ends, and the double hold that the
		// checkers must report comes in every run, not in most.
		o.Client.Waiting = redlock.WaitBackoff
		// A timed run: on a slow or loaded machine one may see no double
		// hold, so the control runs again, up to three times.
		r := untilFound(t, func() *Result { return Run(t, o) }, func(r *Result) bool { return len(r.Overlaps) > 0 })
		require.Positive(t, r.Faults[kind], what)
		assert.NotEmpty(t, r.Overlaps, "the interval check must find the double hold")
		assert.Equal(t, porcupine.Illegal, r.Linearizable, "porcupine must reject the history")
	})
	t.Run("GuardOn", func(t *testing.T) {
		t.Parallel()
		o := base
		o.FaultGap = gapOn
		o.Client.RestartGuard = o.TTL
		r := Run(t, o)
		require.Positive(t, r.Faults[kind], what)
		assert.Positive(t, r.Acquisitions)
		assert.Empty(t, r.Overlaps, "holds that overlap")
		assert.Equal(t, porcupine.Ok, r.Linearizable, "porcupine's verdict; visualization: %s", r.Visualization)
		assert.Zero(t, r.Oversold, "sold + left − initial stock")
		assert.Empty(t, r.Leftover, "lock keys left after their TTL")
	})
}

// TestFailoverChaos fails node 2 over to a replica that lacks what was
// granted, extended and released during the failover's lag (up to 2s). As in
// TestRestartGuardChaos, the two processes see different majorities that
// share only node 2 (Split), so every hold passes through node 2. Holders
// sleep up to twice the TTL, so most holds last until their validity ends
// and their keys expire on the promoted replica when they do on the old
// master: a key granted during the lag is then free on the promoted replica
// while its holder still holds it. (With releases before the TTL, the
// promoted replica would mostly keep the released key of the previous
// holder, which protects the new one.) With the restart guard off, the
// promoted replica grants such a held lock to the other process, which then
// holds a majority too: both checkers must report it (the negative control).
// With the guard on, the connection check sees that the promoted replica is
// another process than the one that recorded the node's state, and starts
// its guard, and no checker finds anything.
func TestFailoverChaos(t *testing.T) {
	base := Options{
		Split: true, Keys: 2, TTL: 3 * time.Second, Hold: 6 * time.Second, Replicated: true,
		Faults: []FaultKind{Failover}, FaultNodes: []int{2}, MaxFaulty: 1, FailoverLag: 2 * time.Second,
		Target: 1 << 30, MaxDuration: 20 * time.Second, // a timed run: the target is never met
	}
	guardPair(t, base, Failover, "node 2 failed over",
		time.Second,   // with the guard off
		5*time.Second) // with it on: the guard keeps node 2 out for a TTL after each failover
}
