package redlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/leakcheck"
)

// TestScriptsReloaded shows that rounds, which run the scripts by SHA, load
// them again on nodes that lost them (a restart, SCRIPT FLUSH).
func TestScriptsReloaded(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	cl := c.client(t, nil)
	for range 2 {
		l, err := cl.Lock(t.Context(), "k", time.Minute)
		require.NoError(t, err)
		c.waitHolders(t, "k", l.Token(), 3)
		require.NoError(t, l.Extend(t.Context(), time.Minute))
		require.NoError(t, l.Unlock(t.Context()))
		require.NoError(t, cl.Close())
		require.Zero(t, c.keys("k"))
		for _, n := range c.nodes {
			require.NoError(t, n.ScriptFlush(t.Context()).Err())
		}
		cl = c.client(t, nil)
	}
}
