package test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/faultproxy"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
	"github.com/redquorum/redquorum/redlock"
)

// failoverRig is three lock nodes: two plain masters (node 1 behind a proxy
// that can make it unreachable) and one replicated group (node 2), reached
// through its Sentinel or through an address that a failover moves from the
// master to the promoted replica.
type failoverRig struct {
	plain *redisproc.Servers
	one   *faultproxy.Proxy // node 1's address
	g     *redisproc.Group
	moved *faultproxy.Proxy // node 2's address without a Sentinel; nil with one
}

func startFailoverRig(t *testing.T, sentinel bool) *failoverRig {
	t.Helper()
	redisproc.Require(t)
	r := &failoverRig{}
	var err error
	r.plain, err = redisproc.Start(t.Context(), 2)
	require.NoError(t, err)
	t.Cleanup(r.plain.Stop)
	r.one = proxyTo(t, r.plain.Addrs[1])
	r.g, err = redisproc.StartGroup(t.Context(), "lock2", sentinel)
	require.NoError(t, err)
	t.Cleanup(r.g.Stop)
	if !sentinel {
		r.moved = proxyTo(t, r.g.Master)
	}
	return r
}

func proxyTo(t *testing.T, addr string) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.NewProxy(addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// sentinelNode returns a lock node client on group g through its Sentinel,
// with the settings of redlock.NodeOptions.
func sentinelNode(g *redisproc.Group) *redis.Client {
	return redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName: g.Name, SentinelAddrs: []string{g.Sentinel},
		Protocol: 2, MaxRetries: -1, ContextTimeoutEnabled: true, DisableIdentity: true,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
}

// client returns a lock client on fresh node clients of its own, as a
// separate process would have, closed with the test.
func (r *failoverRig) client(t *testing.T, opts *redlock.Options) *redlock.Client {
	t.Helper()
	nodes := redlock.NewNodes(r.plain.Addrs[0], r.one.Addr())
	if r.moved != nil {
		nodes = append(nodes, redlock.NewNodes(r.moved.Addr())...)
	} else {
		nodes = append(nodes, sentinelNode(r.g))
	}
	c, err := redlock.New(nodes, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Close()
		for _, n := range nodes {
			_ = n.Close()
		}
	})
	return c
}

// failover kills node 2's master and makes its replica the master: the
// Sentinel does it, or the test does (REPLICAOF NO ONE) and moves the
// node's address to the replica, as a managed service does.
func (r *failoverRig) failover(t *testing.T) {
	t.Helper()
	r.g.KillMaster()
	if r.moved == nil {
		require.NoError(t, r.g.WaitFailover(t.Context()))
		return
	}
	require.NoError(t, r.g.Promote())
	r.moved.SetTarget(r.g.Replica)
	r.moved.Cut()
}

// get reads key on the server at addr.
func get(t *testing.T, addr, key string) string {
	t.Helper()
	d := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	defer d.Close()
	v, err := d.Get(t.Context(), key).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	require.NoError(t, err)
	return unmarked(v)
}

// waitEstablished waits until the node state on each server at addrs is
// out of its restart guard: a new deployment's first lock returns at the
// quorum, before its slower nodes have answered their establishing
// requests.
func waitEstablished(t *testing.T, addrs ...string) {
	t.Helper()
	for _, addr := range addrs {
		d := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
		require.Eventually(t, func() bool { return d.HGet(t.Context(), protocol.StateKey, "g").Val() == "0" },
			5*time.Second, time.Millisecond, "%s established", addr)
		_ = d.Close()
	}
}

// waitReplicated waits until the replica of g has key, a hash, with the
// value it has on the master.
func waitReplicated(t *testing.T, g *redisproc.Group, key string) {
	t.Helper()
	waitSame(t, g, key, func(c *redis.Client) any {
		v, _ := c.HGetAll(t.Context(), key).Result()
		if len(v) == 0 {
			return nil
		}
		return v
	})
}

// waitSame waits until read gives the same value, not nil, on the master
// and the replica of g.
func waitSame(t *testing.T, g *redisproc.Group, key string, read func(*redis.Client) any) {
	t.Helper()
	m := redis.NewClient(&redis.Options{Addr: g.Master, Protocol: 2})
	defer m.Close()
	r := redis.NewClient(&redis.Options{Addr: g.Replica, Protocol: 2})
	defer r.Close()
	require.Eventually(t, func() bool {
		a := read(m)
		return a != nil && assert.ObjectsAreEqual(a, read(r))
	}, 10*time.Second, 10*time.Millisecond, "%s replicated", key)
}

// TestFailoverLosesNoLock: a lock held on nodes 0 and 2 (node 1 was
// unreachable), then node 2 fails over to a replica that never got the
// lock's key. A second client must not obtain the lock before the first
// one's Until: the promoted replica is in its restart guard. Without the
// guard (the negative control) the second client wins nodes 1 and 2, which
// shows that the scenario does lose the key.
func TestFailoverLosesNoLock(t *testing.T) {
	leakcheck.Check(t)
	const ttl = 8 * time.Second
	for _, tc := range []struct {
		name               string
		sentinel, unsafely bool
	}{
		{"sentinel", true, false},
		{"moved address", false, false},
		{"sentinel without guard", true, true},
		{"moved address without guard", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := startFailoverRig(t, tc.sentinel)
			opts := &redlock.Options{NodeTimeout: 500 * time.Millisecond, RestartGuard: ttl, UnsafeNoRestartGuard: tc.unsafely}
			if tc.unsafely {
				opts.RestartGuard = 0
			}
			holder := r.client(t, opts)
			// A first lock establishes the deployment and its node state,
			// which reaches the replica.
			l, err := holder.Lock(t.Context(), "warm-up", ttl)
			require.NoError(t, err)
			require.NoError(t, l.Unlock(t.Context()))
			if !tc.unsafely {
				waitEstablished(t, r.plain.Addrs[0], r.plain.Addrs[1], r.g.Master) // the last establishing requests come after the lock
			}
			waitReplicated(t, r.g, protocol.StateKey)

			r.g.HoldReplication()
			r.one.SetTarget("") // node 1 is down
			r.one.Cut()
			l, err = holder.TryLock(t.Context(), "k", ttl)
			require.NoError(t, err)
			// TryLock returned at the quorum; its call to node 1 may still
			// be dialing, and NodeTimeout bounds it: node 1 comes back only
			// once that call can no longer reach it.
			time.Sleep(opts.NodeTimeout)
			r.one.SetTarget(r.plain.Addrs[1])
			require.Equal(t, l.Token(), get(t, r.plain.Addrs[0], "k"))
			require.Equal(t, "", get(t, r.plain.Addrs[1], "k"))
			require.Equal(t, l.Token(), get(t, r.g.Master, "k"))

			r.failover(t)
			require.Equal(t, "", get(t, r.g.Replica, "k"), "the promoted replica lacks the key")
			require.True(t, time.Now().Before(l.Until()), "the failover took the whole TTL")

			second := r.client(t, opts)
			var won *redlock.Lock
			guarded := false
			for won == nil && time.Now().Before(l.Until()) {
				won, err = second.TryLock(t.Context(), "k", ttl)
				guarded = guarded || errors.Is(err, redlock.ErrGuarded)
				time.Sleep(20 * time.Millisecond)
			}
			if tc.unsafely {
				require.NotNil(t, won, "negative control: without the guard, the failover hands out a held lock")
				assert.True(t, time.Now().Before(l.Until()))
				return
			}
			assert.Nil(t, won, "a second holder before the first one's Until")
			assert.True(t, guarded, "the promoted replica refused as guarded: %v", err)
			assert.ErrorIs(t, err, redlock.ErrTaken, "node 0 still holds the first lock")
			// The other nodes keep serving while node 2 is guarded.
			other, err := second.TryLock(t.Context(), "other", ttl)
			require.NoError(t, err, "nodes 0 and 1 are a quorum")
			require.NoError(t, other.Unlock(t.Context()))
		})
	}
}

// TestReplicatedDeployment: three Sentinel groups lock normally, and
// Unlock leaves no key but the node state on any master or replica.
func TestReplicatedDeployment(t *testing.T) {
	leakcheck.Check(t)
	redisproc.Require(t)
	var groups []*redisproc.Group
	var nodes []redis.UniversalClient
	for _, name := range []string{"a", "b", "c"} {
		g, err := redisproc.StartGroup(t.Context(), name, true)
		require.NoError(t, err)
		t.Cleanup(g.Stop)
		groups = append(groups, g)
		n := sentinelNode(g)
		t.Cleanup(func() { _ = n.Close() })
		nodes = append(nodes, n)
	}
	c, err := redlock.New(nodes, &redlock.Options{NodeTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	for i := range 20 {
		l, err := c.Lock(t.Context(), "job", time.Second)
		require.NoError(t, err, "lock %d", i)
		require.NoError(t, l.Unlock(t.Context()))
	}
	l, err := c.LockMany(t.Context(), []string{"{o}:a", "{o}:b"}, time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	require.NoError(t, c.Do(t.Context(), "do", time.Second, func(context.Context) error { return nil }))
	require.NoError(t, c.Close())

	for _, g := range groups {
		for _, addr := range []string{g.Master, g.Replica} {
			d := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
			require.Eventually(t, func() bool {
				keys, err := d.Keys(t.Context(), "*").Result()
				return err == nil && len(keys) == 1 && keys[0] == protocol.StateKey
			}, 5*time.Second, 10*time.Millisecond, "only the node state is left on %s", addr)
			_ = d.Close()
		}
	}
}

// TestReplicaAsNode: a replica given as a node grants nothing, and the
// error and the log name it; a Sentinel node whose master cannot be found
// says so.
func TestReplicaAsNode(t *testing.T) {
	leakcheck.Check(t)
	redisproc.Require(t)
	addrs, _ := five(t)
	g, err := redisproc.StartGroup(t.Context(), "g", true)
	require.NoError(t, err)
	t.Cleanup(g.Stop)

	nodes := redlock.NewNodes(addrs[0], addrs[1], g.Replica)
	noMaster := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "nosuch", SentinelAddrs: []string{g.Sentinel}, MaxRetries: -1, ContextTimeoutEnabled: true, Protocol: 2})
	t.Cleanup(func() {
		for _, n := range append(nodes, noMaster) {
			_ = n.Close()
		}
	})
	var logs syncBuffer
	// Without the guard: a new deployment with a node refusing is guarded.
	c, err := redlock.New(nodes, &redlock.Options{UnsafeNoRestartGuard: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	l, err := c.TryLock(t.Context(), "k", time.Second)
	require.NoError(t, err, "2 of 3 nodes")
	require.NoError(t, l.Unlock(t.Context()))
	// TryLock and Unlock return at the quorum: the replica's answer, which
	// the log tells of, may come after both.
	require.Eventually(t, func() bool {
		out := logs.String()
		return strings.Contains(out, "is a replica") && strings.Contains(out, g.Replica)
	}, 5*time.Second, time.Millisecond, "the log names the replica")
	assert.Equal(t, "", get(t, g.Master, "k"), "nothing written through the replica")

	var e *redlock.Error
	replica := redlock.NewNodes(g.Replica)[0]
	t.Cleanup(func() { _ = replica.Close() })
	only, err := redlock.New([]redis.UniversalClient{replica}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = only.Close() })
	_, err = only.TryLock(t.Context(), "k", time.Second)
	require.ErrorAs(t, err, &e)
	assert.Equal(t, g.Replica, e.Nodes[0].Addr)
	assert.ErrorContains(t, err, "the server is a replica, not a master")

	alone, err := redlock.New([]redis.UniversalClient{noMaster}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = alone.Close() })
	_, err = alone.TryLock(t.Context(), "k", time.Second)
	require.ErrorAs(t, err, &e)
	assert.Equal(t, "node 0 (Sentinel)", e.Nodes[0].Addr)
	assert.ErrorContains(t, err, "no master from the Sentinels")
}

// syncBuffer is a strings.Builder safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestLeaderAfterLaggingFailover: L1 leads, then resigns while the
// replicas of nodes 0-2 lag; L2 leads; nodes 0-2 fail over to those
// replicas, which still hold L1's lock and record. A new Client's Leader
// must not report L1: the promoted replicas are in their restart guard,
// and a read does not count them. Two nodes in service cannot tell who
// leads.
func TestLeaderAfterLaggingFailover(t *testing.T) {
	leakcheck.Check(t)
	redisproc.Require(t)
	ctx := t.Context()
	plain, err := redisproc.Start(ctx, 2)
	require.NoError(t, err)
	t.Cleanup(plain.Stop)
	groups := make([]*redisproc.Group, 3)
	moved := make([]*faultproxy.Proxy, 3)
	var eg errgroup.Group // each group waits seconds for its replica's first sync
	for i := range groups {
		eg.Go(func() (err error) {
			groups[i], err = redisproc.StartGroup(ctx, fmt.Sprintf("g%d", i), false)
			return err
		})
	}
	err = eg.Wait()
	for _, g := range groups {
		if g != nil {
			t.Cleanup(g.Stop)
		}
	}
	require.NoError(t, err)
	for i, g := range groups {
		moved[i] = proxyTo(t, g.Master)
	}
	addrs := []string{moved[0].Addr(), moved[1].Addr(), moved[2].Addr(), plain.Addrs[0], plain.Addrs[1]}
	open := func(owner string) *redlock.Client {
		c, err := redlock.Open(addrs, &redlock.Options{Fencing: true, Owner: owner, NodeTimeout: 2 * time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a, b := open("L1"), open("L2")

	lead1, err := a.Election("e").Campaign(ctx, "L1", 30*time.Second)
	require.NoError(t, err)
	for _, g := range groups {
		waitReplicated(t, g, protocol.StateKey)
		waitSameString(t, g, protocol.LeaderPrefix+"e") // and the lock before it
		g.HoldReplication()
	}
	require.NoError(t, lead1.Resign(ctx))
	lead2, err := b.Election("e").Campaign(ctx, "L2", 30*time.Second)
	require.NoError(t, err)
	defer func() { _ = lead2.Resign(ctx) }()
	for i, g := range groups {
		g.KillMaster()
		require.NoError(t, g.Promote())
		moved[i].SetTarget(g.Replica)
		moved[i].Cut()
	}

	info, err := open("reader").Election("e").Leader(ctx)
	assert.NotEqual(t, "L1", info.Value, "Leader reports L1, term %d, from the promoted replicas", info.Term)
	require.Error(t, err)
	assert.NotErrorIs(t, err, redlock.ErrNoLeader, "two nodes in service cannot tell that nobody leads")
}

// waitSameString waits until the replica of g has key, a string, with the
// value it has on the master.
func waitSameString(t *testing.T, g *redisproc.Group, key string) {
	t.Helper()
	waitSame(t, g, key, func(c *redis.Client) any {
		v, _ := c.Get(t.Context(), key).Result()
		if v == "" {
			return nil
		}
		return v
	})
}
