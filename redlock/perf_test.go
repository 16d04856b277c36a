package redlock

import (
	"context"
	"net"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/alloc"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
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

// TestTTLBox: a round with another ttl than the last one's sets that ttl on
// the nodes (the boxed ttl argument is shared between rounds of one ttl).
func TestTTLBox(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	cl := c.client(t, nil)
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

// TestNewNodesConnCheck: NewNodes' clients let go-redis check a pooled
// connection for a close by the server only when it has been idle for
// connCheckIdle. Restarting the server closes every pooled connection: used
// at once, each fails one command (the check was skipped); used after
// connCheckIdle, none fails (the check found them closed and go-redis
// dialled anew).
func TestNewNodesConnCheck(t *testing.T) {
	leakcheck.Check(t)
	s := redisproc.StartT(t, 1)
	n := NewNodes(s.Addrs[0])[0].(*redis.Client)
	t.Cleanup(func() { _ = n.Close() })
	restartAfter := func(idle time.Duration) (pooled, failed int) {
		var wg sync.WaitGroup
		for range 4 { // a few connections in the pool
			wg.Go(func() { assert.NoError(t, n.Ping(t.Context()).Err()) })
		}
		wg.Wait()
		pooled = int(n.PoolStats().IdleConns)
		require.NoError(t, s.Restart(t.Context(), 0)) // killed, and started again on its address
		time.Sleep(idle)
		for range pooled {
			if n.Ping(t.Context()).Err() != nil {
				failed++
			}
		}
		require.NoError(t, n.Ping(t.Context()).Err(), "recovered")
		return pooled, failed
	}
	pooled, failed := restartAfter(0)
	require.Positive(t, pooled)
	assert.Equal(t, pooled, failed, "connections used at once were not checked")
	pooled, failed = restartAfter(2 * connCheckIdle)
	require.Positive(t, pooled)
	assert.Zero(t, failed, "connections idle for %v were not checked", 2*connCheckIdle)

	_, isSys := net.Conn(&checkedConn{}).(syscall.Conn)
	assert.True(t, isSys)
}

// TestNodeOptionsDialOnce: a request to a node that refuses connections
// dials it once and fails, instead of go-redis's default of five dials
// 100 ms apart; the negative control shows the default's retries.
func TestNodeOptionsDialOnce(t *testing.T) {
	leakcheck.Check(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now: dials are refused
	dials := func(opts *redis.Options) int {
		var n int
		d := &net.Dialer{}
		opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
			n++
			return d.DialContext(ctx, network, addr)
		}
		opts.DialerRetryTimeout = time.Millisecond
		cl := redis.NewClient(opts)
		defer cl.Close()
		require.Error(t, cl.Ping(t.Context()).Err())
		return n
	}
	assert.Equal(t, 1, dials(NodeOptions(addr)))
	def := NodeOptions(addr)
	def.DialerRetries = 0 // go-redis's default
	assert.Equal(t, 5, dials(def), "go-redis's default")
}

// lockUnlockAllocs is the allocation budget of one uncontended Lock+Unlock
// of distinct keys by a Client without an Observer over five redis-server
// nodes, every goroutine of the process counted. It was measured at 81–82
// (go1.26.8, go-redis v9.23.0, redis-server 7.0.15 on loopback, 2 cores):
// 66 with the acquire script, and 3 more per node for the pipelined
// acquire, all in go-redis's pipeline (Exec's slice of commands, and two in
// its check of the pipeline's error, nil or not). A loaded machine adds a
// few. The budget fails a regression of about 10%.
const lockUnlockAllocs = 90

// TestLockUnlockAllocs pins the allocations of an uncontended Lock+Unlock
// to lockUnlockAllocs. The race detector adds allocations of its own, so the
// test runs without it only (make test runs it so after its -race run).
func TestLockUnlockAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector adds allocations of its own; run without -race")
	}
	leakcheck.Check(t)
	s := redisproc.StartT(t, 5)
	nodes := NewNodes(s.Addrs...)
	c, err := New(nodes, &Options{NodeTimeout: time.Second}) // a loaded machine stalls for tens of ms
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, c.Close())
		for _, n := range nodes {
			_ = n.Close()
		}
	})
	ctx := t.Context()
	// Distinct keys, as the bench's 1-caller scenario: the same key again
	// may find its last release still on the way to a node, which changes
	// how the next acquire goes there (see node.Node.pipelines).
	keys := make([]string, 501) // AllocsPerRun runs the function once more to warm up
	for i := range keys {
		keys[i] = "allocs:" + strconv.Itoa(i)
	}
	n := 0
	got := testing.AllocsPerRun(500, func() {
		l, err := c.Lock(ctx, keys[n], 10*time.Second)
		n++
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	})
	t.Logf("%.0f allocations per Lock+Unlock (budget %d)", got, lockUnlockAllocs)
	require.LessOrEqual(t, got, float64(lockUnlockAllocs),
		"allocations per Lock+Unlock: %.0f, budget %d; find the new ones with -benchmem -memprofile on BenchmarkLockUnlockNative", got, lockUnlockAllocs)
}
