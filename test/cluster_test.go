package test

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/hashslot"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
	"github.com/redquorum/redquorum/redlock"
)

// clusters starts one Redis Cluster per size in sizes (native redis-server
// processes: a Cluster needs no proxy here) and returns a go-redis cluster
// client for each, with the settings redlock.NodeOptions gives a plain
// node. Without redis-server it skips, or fails under CI=true.
func clusters(t *testing.T, sizes ...int) []*redis.ClusterClient {
	redisproc.Require(t)
	var out []*redis.ClusterClient
	for _, n := range sizes {
		s, err := redisproc.StartCluster(t.Context(), n)
		require.NoError(t, err)
		t.Cleanup(s.Stop)
		cl := redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: s.Addrs, Protocol: 2, MaxRetries: -1, ContextTimeoutEnabled: true, DisableIdentity: true,
			DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
		})
		t.Cleanup(func() { _ = cl.Close() })
		require.NoError(t, cl.ForEachShard(t.Context(), func(ctx context.Context, c *redis.Client) error { return c.Ping(ctx).Err() }))
		out = append(out, cl)
	}
	return out
}

// keyOnShard returns a key with a hash tag of its own whose slot lies in the
// i-th of n even slot ranges (the i-th master of redisproc.StartCluster).
func keyOnShard(i, n int, name string) string {
	for j := 0; ; j++ {
		k := "{" + name + strconv.Itoa(j) + "}"
		if s := hashslot.Slot(k); s >= i*16384/n && s < (i+1)*16384/n {
			return k
		}
	}
}

// TestClusterNodes: lock nodes that are Redis Clusters, against real
// redis-server: node 0 a cluster of three masters (keys on each of its
// shards), nodes 1 and 2 clusters of one. Lock, Extend, LockMany and
// Unlock work on every shard; each hash slot has its own node state (the
// scripts may only touch one slot), so the restart guard begins anew for
// every slot that a deployment has not used yet (see docs/DESIGN.md, "Multi-key
// locks, Redis Cluster and Ring nodes"); a shard that loses its data is
// guarded while the others grant.
// (Fencing, whose counters are kept in the same per-slot state, needs a
// quorum of plain masters: see TestClusterNodeFencing.)
func TestClusterNodes(t *testing.T) {
	leakcheck.Check(t)
	cls := clusters(t, 3, 1, 1)
	nodes := make([]redis.UniversalClient, len(cls))
	for i, c := range cls {
		nodes[i] = c
	}
	const guard, ttl = 3 * time.Second, 2 * time.Second
	newClient := func() *redlock.Client {
		cl, err := redlock.New(nodes, &redlock.Options{RestartGuard: guard, NodeTimeout: time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { _ = cl.Close() })
		return cl
	}
	ctx := t.Context()
	holds := func(key, token string) int {
		n := 0
		for _, c := range cls {
			if v, err := c.Get(ctx, key).Result(); err == nil && unmarked(v) == token {
				n++
			}
		}
		return n
	}

	// A key on each shard of node 0. A Client that has never seen a node in
	// service takes the first slot it finds guarded on every node for a new
	// deployment: one fresh Client per key.
	for shard := range 3 {
		key := keyOnShard(shard, 3, "stock")
		cl := newClient()
		l, err := cl.TryLock(ctx, key, ttl)
		require.NoError(t, err, "shard %d", shard)
		require.Eventually(t, func() bool { return holds(key, l.Token()) == 3 }, 2*time.Second, 10*time.Millisecond, "shard %d: every node holds the token", shard)
		require.NoError(t, l.Extend(ctx, guard))
		assert.Eventually(t, func() bool { return cls[0].PTTL(ctx, key).Val() > ttl }, 2*time.Second, 10*time.Millisecond, "extended on node 0")
		require.NoError(t, l.Unlock(ctx))
		require.Eventually(t, func() bool { return holds(key, l.Token()) == 0 }, 2*time.Second, 10*time.Millisecond)

		// The slot is now in service: the same Client locks it again at once.
		l2, err := cl.TryLock(ctx, key, ttl)
		require.NoError(t, err, "shard %d, again", shard)
		require.NoError(t, l2.Unlock(ctx))
	}

	// Several keys with one hash tag: one slot, one lock.
	cl := newClient()
	tag := keyOnShard(1, 3, "order")
	many, err := cl.TryLockMany(ctx, []string{tag + ":stock", tag + ":payment"}, ttl)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return holds(tag+":payment", many.Token()) == 3 }, 2*time.Second, 10*time.Millisecond)
	require.NoError(t, many.Unlock(ctx))

	// A slot this deployment has not used yet is guarded on every node,
	// until the guard has passed.
	fresh := keyOnShard(2, 3, "fresh")
	_, err = cl.TryLock(ctx, fresh, ttl)
	require.ErrorIs(t, err, redlock.ErrGuarded, "a new slot on an established deployment")
	var last error
	if !assert.Eventually(t, func() bool {
		l, err := cl.TryLock(ctx, fresh, ttl)
		if last = err; err != nil {
			return false
		}
		last = l.Unlock(ctx)
		return true
	}, 3*guard, 100*time.Millisecond) {
		t.Fatalf("after the guard: %v", last)
	}

	// The shard of node 0 that holds key loses its data: node 0 is guarded
	// for that slot, the two others grant.
	key := keyOnShard(0, 3, "stock")
	require.NoError(t, cls[0].ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		if err := c.Get(ctx, key).Err(); err == nil || errors.Is(err, redis.Nil) {
			return c.FlushAll(ctx).Err() // the master that serves key
		}
		return nil // MOVED: another shard
	}))
	l, err := cl.TryLock(ctx, key, ttl)
	require.NoError(t, err)
	assert.NotEqual(t, l.Token(), cls[0].Get(ctx, key).Val(), "node 0, whose shard lost its data, did not grant")
	require.NoError(t, l.Unlock(ctx)) // a quorum released it

	// A Lock that waits is woken by the release: a Redis Cluster carries a
	// PUBLISH to the subscribers on every one of its masters.
	wokenByRelease(t, cl, nodes, guard, key, ttl)

	// Nothing is left but the nodes' states.
	for i, c := range cls {
		require.NoError(t, c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			keys, err := m.Keys(ctx, "*").Result()
			for _, k := range keys {
				if len(k) < len("redquorum:") || k[:len("redquorum:")] != "redquorum:" {
					t.Errorf("node %d: key %q left", i, k)
				}
			}
			return err
		}))
	}
}

// TestClusterNodeFencing: fencing with one Cluster node among plain masters
// (a quorum of plain masters, which New requires). The first slot is taken
// as a new deployment on every node; the others are guarded on the Cluster
// node (new slots), and the plain masters make the quorum of the lock and of
// the fence without it. Fences increase across every shard and slot.
func TestClusterNodeFencing(t *testing.T) {
	leakcheck.Check(t)
	cluster, nodes := clusterAndPlain(t)
	cl, err := redlock.New(nodes, &redlock.Options{Fencing: true, NodeTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	ctx := t.Context()
	var last uint64
	for shard := range 3 {
		key := keyOnShard(shard, 3, "fenced")
		for round := range 2 {
			l, err := cl.Lock(ctx, key, 10*time.Second)
			require.NoError(t, err, "shard %d, round %d", shard, round)
			assert.Greater(t, l.Fence(), last, "shard %d, round %d", shard, round)
			last = l.Fence()
			require.NoError(t, l.Unlock(ctx))
		}
	}
	// The first slot's state on the Cluster node: established, its counter
	// known (the new deployment set it, write-backs raise it).
	first := protocol.SlotStateKey("", keyOnShard(0, 3, "fenced"), new(hashslot.Tags))
	st := cluster.HGetAll(ctx, first).Val()
	assert.Equal(t, "0", st["g"], "established: %v", st)
	assert.Contains(t, st, "f", "counter known: %v", st)
}

// clusterAndPlain returns the nodes of a Client whose first node is a
// Cluster of three masters, which it also returns, and whose two others are
// plain masters: a quorum of plain masters, as Options.Fencing needs.
func clusterAndPlain(t *testing.T) (*redis.ClusterClient, []redis.UniversalClient) {
	cluster := clusters(t, 3)[0]
	plain, err := redisproc.Start(t.Context(), 2)
	require.NoError(t, err)
	t.Cleanup(plain.Stop)
	nodes := append([]redis.UniversalClient{cluster}, redlock.NewNodes(plain.Addrs...)...)
	for _, n := range nodes[1:] {
		t.Cleanup(func() { _ = n.Close() })
	}
	return cluster, nodes
}

// TestClusterNodeElection: an election on a Redis Cluster node beside two
// plain masters needs a name with a hash tag, so that its lock and record
// share a slot; with one, campaign, Leader, Proclaim and Resign work.
func TestClusterNodeElection(t *testing.T) {
	leakcheck.Check(t)
	_, nodes := clusterAndPlain(t)
	cl, err := redlock.New(nodes, &redlock.Options{Fencing: true, NodeTimeout: time.Second, Owner: "c"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	ctx := t.Context()

	_, err = cl.Election("scheduler").Campaign(ctx, "v", 10*time.Second)
	require.ErrorContains(t, err, `election name "scheduler" has no hash tag`)
	e := cl.Election(keyOnShard(1, 3, "scheduler"))
	lead, err := e.Campaign(ctx, "v1", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, lead.Proclaim(ctx, "v2"))
	info, err := e.Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, redlock.LeaderInfo{Value: "v2", Term: lead.Term(), Owner: "c", TTL: info.TTL}, info)
	require.NoError(t, lead.Resign(ctx))
	_, err = e.Leader(ctx)
	require.ErrorIs(t, err, redlock.ErrNoLeader)
}

// TestRingNode: a go-redis Ring of two shards as one lock node, beside two
// plain masters, against real redis-server. The Ring routes each key, and
// the node state beside it, to one shard: each shard keeps one state. The
// first lock, on a new deployment, establishes every node's state for its
// key's shard; a key on the other shard finds that shard new, so the Ring
// refuses it (guarded) while the plain masters grant; once the guard has
// passed, the Ring grants keys on both shards.
func TestRingNode(t *testing.T) {
	leakcheck.Check(t)
	if _, err := exec.LookPath("redis-server"); err != nil {
		clusters(t) // skips, or fails under CI=true
	}
	srv, err := redisproc.Start(t.Context(), 4)
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	ringOpts := &redis.RingOptions{
		Addrs:    map[string]string{"a": srv.Addrs[0], "b": srv.Addrs[1]},
		Protocol: 2, MaxRetries: -1, ContextTimeoutEnabled: true, DisableIdentity: true,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	}
	ring := redis.NewRing(ringOpts)
	t.Cleanup(func() { _ = ring.Close() })
	nodes := append([]redis.UniversalClient{ring}, redlock.NewNodes(srv.Addrs[2:]...)...)
	for _, n := range nodes[1:] {
		t.Cleanup(func() { _ = n.Close() })
	}
	const guard = 2 * time.Second
	cl, err := redlock.New(nodes, &redlock.Options{RestartGuard: guard, NodeTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	ctx := t.Context()
	direct := make([]*redis.Client, 2)
	for i := range direct {
		direct[i] = redis.NewClient(redlock.NodeOptions(srv.Addrs[i]))
		t.Cleanup(func() { _ = direct[i].Close() })
	}
	// The shard that holds key, or -1 when neither does.
	holder := func(key string) int {
		for i, d := range direct {
			if d.Exists(ctx, key).Val() == 1 {
				return i
			}
		}
		return -1
	}
	// The first lock establishes the first key's shard as a new
	// deployment; the Ring holds that key.
	first, err := cl.TryLock(ctx, "job0", time.Second)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return holder("job0") >= 0 }, 2*time.Second, 10*time.Millisecond)
	established := holder("job0")
	require.NoError(t, first.Unlock(ctx))
	// A key on the other shard: the Ring refuses it (that shard's state is
	// new, so it begins its guard), the plain masters grant it.
	other := ""
	for i := 1; other == ""; i++ {
		require.Less(t, i, 100, "no key on the second shard")
		key := "job" + strconv.Itoa(i)
		l, err := cl.TryLock(ctx, key, time.Second)
		require.NoError(t, err, key)
		// The Ring answers after the quorum: wait until the key is held on
		// a shard, or the other shard has begun its guard.
		where := -1
		require.Eventually(t, func() bool {
			where = holder(key)
			return where >= 0 || direct[1-established].Exists(ctx, "redquorum:node").Val() == 1
		}, 2*time.Second, 10*time.Millisecond, key)
		if where == -1 {
			other = key
			g := direct[1-established].HGet(ctx, "redquorum:node", "g").Val()
			assert.NotEqual(t, "0", g, "the second shard is guarded")
		}
		require.NoError(t, l.Unlock(ctx))
	}
	keys := []string{"job0", other}
	// Once both shards' guards have passed, both keys are held on the Ring too.
	time.Sleep(guard + 200*time.Millisecond)
	for _, key := range keys {
		l, err := cl.TryLock(ctx, key, time.Second)
		require.NoError(t, err, key)
		// TryLock returns at its quorum; the Ring's answer may come later.
		assert.Eventually(t, func() bool { return unmarked(ring.Get(ctx, key).Val()) == l.Token() }, 2*time.Second, 5*time.Millisecond, "%s: the Ring granted", key)
		require.NoError(t, l.Unlock(ctx))
	}
	// A Lock that waits is woken by the release, announced by the plain
	// masters (the Ring is not subscribed: it routes a channel by its name,
	// not to the key's shard).
	wokenByRelease(t, cl, nodes, guard, "job0", guard)

	// One state per shard, none per key.
	for i, d := range direct {
		assert.Equal(t, []string{"redquorum:node"}, d.Keys(ctx, "*").Val(), "shard %d", i)
	}
}

// wokenByRelease locks key through cl for ttl, starts a Lock of key in a
// second Client on nodes whose retry delay is 10 s, unlocks once that Lock
// waits, and checks that the waiter was woken by the release: it must hold
// the key within 1 s, while the key would expire only at the end of ttl.
// ttl must be well above 1 s.
func wokenByRelease(t *testing.T, cl *redlock.Client, nodes []redis.UniversalClient, guard time.Duration, key string, ttl time.Duration) {
	t.Helper()
	ctx := t.Context()
	// held's key expires on the nodes no sooner than expiry: a waiter that
	// gets the lock before then was woken by the release. The longest hold
	// the guard allows gives a loaded machine time to wake it.
	hold := guard
	expiry := time.Now().Add(hold)
	held, err := cl.TryLock(ctx, key, hold)
	require.NoError(t, err)
	waiter, err := redlock.New(nodes, &redlock.Options{RestartGuard: guard, NodeTimeout: time.Second,
		MinRetryDelay: 10 * time.Second, MaxRetryDelay: 10 * time.Second})
	require.NoError(t, err)
	defer waiter.Close()
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Lock(ctx, key, ttl)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	// The waiter waits: its first round was refused by a node, which marked
	// the key as waited for and so will announce the release, and the
	// waiter has subscribed to the key's channel there.
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			v, _ := n.Get(ctx, key).Result()
			if v == protocol.WaitedPrefix+held.Token() && subscribers(ctx, n, protocol.ReleasedChannel+key) > 0 {
				return true
			}
		}
		return false
	}, 5*time.Second, 5*time.Millisecond, "the waiter waits")
	require.NoError(t, held.Unlock(ctx))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(time.Until(expiry)):
		t.Fatalf("the waiter slept through the release, until the key's expiry (%v)", hold)
	}
}

// subscribers returns how many subscribers channel has on n's servers
// (every master of a Cluster, every shard of a Ring).
func subscribers(ctx context.Context, n redis.UniversalClient, channel string) int64 {
	var total atomic.Int64
	count := func(ctx context.Context, c *redis.Client) error {
		total.Add(c.PubSubNumSub(ctx, channel).Val()[channel])
		return nil
	}
	switch n := n.(type) {
	case *redis.ClusterClient:
		_ = n.ForEachMaster(ctx, count)
	case *redis.Ring:
		_ = n.ForEachShard(ctx, count)
	case *redis.Client:
		_ = count(ctx, n)
	}
	return total.Load()
}
