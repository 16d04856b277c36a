package redlock

import (
	"context"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
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

// TestNewNodesSkipConnCheck: the connections of NewNodes' clients hide
// syscall.Conn, which go-redis needs for its per-command idle check, and the
// clients recover from a node restart (the server closed every pooled
// connection) with at most one failed command per pooled connection.
func TestNewNodesSkipConnCheck(t *testing.T) {
	leakcheck.Check(t)
	var dialed net.Conn
	dial := noConnCheck{}.DialHook(func(ctx context.Context, network, addr string) (net.Conn, error) {
		return net.Dial(network, addr)
	})
	m := miniredis.RunT(t)
	c, err := dial(t.Context(), "tcp", m.Addr())
	require.NoError(t, err)
	dialed = c
	t.Cleanup(func() { _ = dialed.Close() })
	_, isSys := dialed.(syscall.Conn)
	assert.False(t, isSys, "the wrapped connection still offers SyscallConn")

	nodes := NewNodes(m.Addr())
	n := nodes[0].(*redis.Client)
	t.Cleanup(func() { _ = n.Close() })
	var wg sync.WaitGroup
	for range 4 { // fill the pool with a few connections
		wg.Go(func() { assert.NoError(t, n.Ping(t.Context()).Err()) })
	}
	wg.Wait()
	pooled := int(n.PoolStats().IdleConns)
	require.Positive(t, pooled)
	m.Close()
	require.NoError(t, m.Restart())
	failed := 0
	for range pooled + 1 {
		if n.Ping(t.Context()).Err() != nil {
			failed++
		}
	}
	assert.Equal(t, pooled, failed, "each pooled connection fails once: go-redis did not check it")
	assert.Equal(t, newNodesMaxIdle, n.Options().ConnMaxIdleTime)
	assert.NoError(t, n.Ping(t.Context()).Err(), "recovered")
}
