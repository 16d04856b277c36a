package test

// The lifecycle features (restart guard, fencing, multi-key locks) on real
// Redis masters started by the rig.

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/locktest/rig"
	"github.com/redquorum/redquorum/redlock"
)

var errCut = errors.New("cut off by the test")

// cutHook fails every command of one node client while on: a way to keep one
// client's requests from one node while other clients reach it.
type cutHook struct {
	on   atomic.Bool
	cuts atomic.Int64 // commands failed so far
}

func (h *cutHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *cutHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() {
			h.cuts.Add(1)
			cmd.SetErr(errCut)
			return errCut
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook cuts pipelines too: the Client sends concurrent
// commands to one node as one pipeline.
func (h *cutHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.on.Load() {
			h.cuts.Add(1)
			for _, cmd := range cmds {
				cmd.SetErr(errCut)
			}
			return errCut
		}
		return next(ctx, cmds)
	}
}

// lockClient is a Client on the rig's nodes with a cutHook on each node client.
type lockClient struct {
	*redlock.Client
	cuts []*cutHook
}

func newLockClient(t *testing.T, c *rig.Cluster, opts *redlock.Options) *lockClient {
	t.Helper()
	nodes := redlock.NewNodes(c.Addrs()...)
	lc := &lockClient{}
	for _, n := range nodes {
		h := &cutHook{}
		n.AddHook(h)
		lc.cuts = append(lc.cuts, h)
		t.Cleanup(func() { _ = n.Close() })
	}
	if opts.NodeTimeout == 0 {
		opts.NodeTimeout = time.Second // a loaded machine with Docker
	}
	opts.NodeClientsAsGiven = true // through the cut hooks
	cl, err := redlock.New(nodes, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	lc.Client = cl
	return lc
}

// lockOn locks key on exactly the given nodes: the client's requests to the
// others fail.
func (lc *lockClient) lockOn(t *testing.T, key string, ttl time.Duration, nodes ...int) *redlock.Lock {
	t.Helper()
	before := make([]int64, len(lc.cuts))
	for i, h := range lc.cuts {
		before[i] = h.cuts.Load()
		h.on.Store(!slices.Contains(nodes, i))
	}
	l, err := lc.TryLock(t.Context(), key, ttl)
	// The round returns at its quorum: its acquires to the other nodes may
	// not have reached their hooks yet. Keep those nodes cut until they have.
	for i, h := range lc.cuts {
		if h.on.Load() {
			require.Eventually(t, func() bool { return h.cuts.Load() > before[i] }, 5*time.Second, time.Millisecond,
				"the acquire to node %d was not cut", i)
		}
	}
	for _, h := range lc.cuts {
		h.on.Store(false)
	}
	require.NoError(t, err)
	return l
}

// inspect returns one plain client per node, for looking at the nodes' keys.
func inspect(t *testing.T, c *rig.Cluster) []*redis.Client {
	var cs []*redis.Client
	for _, a := range c.Addrs() {
		n := redis.NewClient(redlock.NodeOptions(a))
		t.Cleanup(func() { _ = n.Close() })
		cs = append(cs, n)
	}
	return cs
}

// TestRestartGuardRig is the node-crash scenario on five real masters: A
// holds a lock on exactly three nodes, seconds after the deployment came
// up; one of them restarts without data; B tries. Without the guard B wins
// while A's lock is valid: the negative control shows the violation. With
// the guard, B does not get the lock.
func TestRestartGuardRig(t *testing.T) {
	const ttl = 30 * time.Second
	for _, guard := range []bool{false, true} {
		name := "guard off"
		if guard {
			name = "guard on"
		}
		t.Run(name, func(t *testing.T) {
			leakcheck.Check(t)
			c := rig.Start(t, 5)
			ctx := t.Context()
			a := newLockClient(t, c, &redlock.Options{UnsafeNoRestartGuard: !guard})
			b := newLockClient(t, c, &redlock.Options{UnsafeNoRestartGuard: !guard})

			warm, err := a.TryLock(ctx, "warm-up", ttl)
			require.NoError(t, err, "a brand-new deployment locks at once")
			require.NoError(t, warm.Unlock(ctx))

			la := a.lockOn(t, "k", ttl, 0, 1, 2)
			// A stays open: its Close would release la, whose holder this
			// test plays (paused, and still valid). Its acquires to nodes
			// 3 and 4 were cut before they were sent.
			for i, n := range inspect(t, c) {
				v, err := n.Get(ctx, "k").Result()
				if i < 3 {
					require.NoError(t, err, "node %d", i)
					require.Equal(t, la.Token(), unmarked(v), "node %d", i)
				} else if err == nil {
					require.True(t, strings.HasPrefix(v, "redquorum:gone:"), "node %d holds %q", i, v)
				} else {
					require.ErrorIs(t, err, redis.Nil, "node %d", i)
				}
			}

			require.NoError(t, c.Nodes[2].Restart(ctx))
			lb, err := b.TryLock(ctx, "k", ttl)
			if !guard {
				require.NoError(t, err, "negative control: without the guard B obtains the lock")
				now := time.Now()
				assert.True(t, now.Before(la.Until()) && now.Before(lb.Until()),
					"two valid holders: A until %v, B until %v, now %v", la.Until(), lb.Until(), now)
				return
			}
			require.ErrorIs(t, err, redlock.ErrNotObtained)
			var e *redlock.Error
			require.ErrorAs(t, err, &e)
			assert.ErrorIs(t, e.Nodes[2].Err, redlock.ErrGuarded, "the restarted node")
			assert.ErrorIs(t, e.Nodes[0].Err, redlock.ErrTaken)
			assert.True(t, time.Now().Before(la.Until()), "A's lock was still valid")
		})
	}
}

// TestFencingRig: a holder paused beyond its validity, while one node
// restarts without its data, is turned away by a resource that checks
// fences.
func TestFencingRig(t *testing.T) {
	leakcheck.Check(t)
	c := rig.Start(t, 5)
	ctx := t.Context()
	opts := func() *redlock.Options {
		return &redlock.Options{Fencing: true, RestartGuard: 2 * time.Second}
	}
	a, b := newLockClient(t, c, opts()), newLockClient(t, c, opts())
	var res resource

	la, err := a.Lock(ctx, "k", 500*time.Millisecond)
	require.NoError(t, err)
	require.NoError(t, res.write(la.Fence(), "a"))
	// A pauses beyond its validity; meanwhile node 0 loses its data and its
	// fence counter.
	require.NoError(t, c.Nodes[0].Restart(ctx))
	time.Sleep(time.Until(la.Until()) + 100*time.Millisecond)

	lb, err := b.Lock(ctx, "k", 500*time.Millisecond)
	require.NoError(t, err)
	assert.Greater(t, lb.Fence(), la.Fence())
	require.NoError(t, res.write(lb.Fence(), "b"))
	assert.ErrorIs(t, res.write(la.Fence(), "a, late"), errStale, "the stale holder is rejected")
	assert.Equal(t, "b", res.value())

	// Successive holders keep increasing across many rounds and clients.
	last := lb.Fence()
	require.NoError(t, lb.Unlock(ctx))
	for i := range 10 {
		cl := a
		if i%2 == 1 {
			cl = b
		}
		l, err := cl.Lock(ctx, "k", time.Second)
		require.NoError(t, err)
		assert.Greater(t, l.Fence(), last)
		last = l.Fence()
		require.NoError(t, l.Unlock(ctx))
	}
}

var errStale = errors.New("stale fence")

// resource is a store that accepts a write only with a fence at least as
// high as the highest it has seen.
type resource struct {
	mu    sync.Mutex
	fence uint64
	v     string
}

func (r *resource) write(fence uint64, v string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fence < r.fence {
		return errStale
	}
	r.fence, r.v = fence, v
	return nil
}

func (r *resource) value() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.v
}

// TestLockManyRig: a multi-key lock on real Redis takes all keys on a node
// or none, and Unlock and Extend act on all of them.
func TestLockManyRig(t *testing.T) {
	leakcheck.Check(t)
	c := rig.Start(t, 5)
	ctx := t.Context()
	a, b := newLockClient(t, c, &redlock.Options{}), newLockClient(t, c, &redlock.Options{})
	l, err := a.LockMany(ctx, []string{"x", "y", "z"}, 10*time.Second)
	require.NoError(t, err)

	_, err = b.TryLockMany(ctx, []string{"z", "w"}, 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrTaken)
	require.NoError(t, b.Close())
	for i, n := range inspect(t, c) {
		v, _ := n.Get(ctx, "w").Result()
		assert.True(t, v == "" || strings.HasPrefix(v, "redquorum:gone:"), "node %d took part of a lock: %q", i, v)
	}

	require.NoError(t, l.Extend(ctx, 20*time.Second))
	for i, n := range inspect(t, c) {
		for _, k := range []string{"x", "y", "z"} {
			// Extend returns at its quorum; the others follow.
			assert.Eventually(t, func() bool { return n.PTTL(ctx, k).Val() > 15*time.Second }, 5*time.Second, 10*time.Millisecond, "node %d key %s", i, k)
		}
	}
	b = newLockClient(t, c, &redlock.Options{})
	_, err = b.TryLock(ctx, "y", time.Second)
	require.ErrorIs(t, err, redlock.ErrTaken)
	require.NoError(t, b.Close()) // its releases have landed
	require.NoError(t, l.Unlock(ctx))
	b = newLockClient(t, c, &redlock.Options{})
	_, err = b.TryLockMany(ctx, []string{"y", "w"}, time.Second)
	require.NoError(t, err)
}
