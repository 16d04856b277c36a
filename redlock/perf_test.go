package redlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/alloc"
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

// TestTTLBox: rounds with one ttl share its boxed argument, and a round with
// another ttl sets that ttl on the nodes.
func TestTTLBox(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	cl := c.client(t, nil)
	assert.Equal(t, int64(1000), cl.boxTTL(time.Second))
	assert.Equal(t, int64(2000), cl.boxTTL(2*time.Second))
	assert.Equal(t, int64(1000), cl.boxTTL(time.Second))
	for _, ttl := range []time.Duration{20 * time.Second, 40 * time.Second, 20 * time.Second} {
		l, err := cl.Lock(t.Context(), "k", ttl)
		require.NoError(t, err)
		c.waitHolders(t, "k", l.Token(), 3)
		for _, m := range c.srv {
			assert.InDelta(t, ttl.Seconds(), m.TTL("k").Seconds(), 1)
		}
		require.NoError(t, l.Unlock(t.Context()))
		settle(cl) // the release to the third node has landed before the next acquire
	}
	require.NoError(t, cl.Close())
}

// TestManyNodes: nine nodes, more than are allocated with a Lock or a
// Round, lock, extend and unlock, also when two hang (their late answers
// are released).
func TestManyNodes(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, alloc.Small+2)
	cl := c.client(t, &Options{NodeTimeout: time.Second})
	l, err := cl.Lock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	c.waitHolders(t, "k", l.Token(), len(c.srv))
	require.NoError(t, l.Extend(t.Context(), time.Minute))
	require.NoError(t, l.Unlock(t.Context()))
	rel1, rel2 := c.hooks[0].block(), c.hooks[8].block()
	l, err = cl.Lock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	rel1()
	rel2()
	require.NoError(t, cl.Close())
	assert.Zero(t, c.keys("k"))
}
