package test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
)

// TestFencesAfterEveryNodeLostItsData: fenced locks on five masters, then
// every master restarts without its data, within the new-deployment window
// of one another. A new Client finds every node guarded, each guard begun
// on an empty node, and takes the shortcut: the nodes' counters start
// again, from their clocks in microseconds, so the new holder's fence is
// above every fence issued before the loss. (Counters that started at 0,
// as the shortcut's did, gave the new holder fence 1 after fences up to 5:
// a resource that stores the highest fence refuses every new holder and
// still accepts the old ones.)
func TestFencesAfterEveryNodeLostItsData(t *testing.T) {
	leakcheck.Check(t)
	r := startOpsRig(t, false)
	before := r.client(false)
	r.establish(before)
	last := r.fencedLocks(before, 0, "before the loss")
	last = r.fencedLocks(before, last, "before the loss")

	for i := range r.s.Addrs {
		require.NoError(t, r.s.Restart(t.Context(), i))
	}
	after := r.client(false)
	l, err := after.TryLock(t.Context(), "k", opsTTL)
	require.NoError(t, err, "every node lost its data: the shortcut establishes them at once")
	require.Greater(t, l.Fence(), last, "a fence after the loss is above every fence before it")
	require.NoError(t, l.Unlock(t.Context()))
	r.fencedLocks(after, l.Fence(), "after the loss")
}
