// Package test holds the integration suites: every public behaviour of the
// redlock core, the least-privilege ACL and the lifecycle features (restart
// guard, fencing, multi-key locks) against real Redis 7 masters started by
// locktest/rig.
//
// The nodes are reached through the rig's proxies, which add latency or cut a
// node off; the tests read each node directly to see what the library left
// there. Timing assertions compare against injected delays at least twice as
// long as the bound they check, so that a loaded machine does not make them
// flaky.
package test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/locktest/rig"
	"github.com/redquorum/redquorum/redlock"
)

// nodes is a rig cluster and a direct client per node, for inspection.
type nodes struct {
	c      *rig.Cluster
	direct []*redis.Client
}

// startNodes starts n masters; the direct clients log in as user (with
// password pass) unless user is empty.
func startNodes(t *testing.T, n int, user, pass string, opts ...rig.Option) *nodes {
	leakcheck.Check(t)
	c := rig.Start(t, n, opts...)
	ns := &nodes{c: c}
	for _, node := range c.Nodes {
		o := redlock.NodeOptions(node.Addr())
		o.Username, o.Password = user, pass
		cl := redis.NewClient(o)
		t.Cleanup(func() { cl.Close() })
		ns.direct = append(ns.direct, cl)
	}
	return ns
}

// client returns a redlock client on the cluster's nodes; it is closed, and
// its node clients with it, when the test ends.
//
// NodeTimeout defaults to 1s instead of 50ms: on a loaded two-core machine
// running other test binaries under the race detector, a healthy node
// behind the rig's proxy can take tens of milliseconds to answer.
func (ns *nodes) client(t *testing.T, opts *redlock.Options) *redlock.Client {
	t.Helper()
	if opts == nil {
		opts = &redlock.Options{}
	}
	if opts.NodeTimeout == 0 {
		opts.NodeTimeout = time.Second
	}
	nodes := redlock.NewNodes(ns.c.Addrs()...)
	c, err := redlock.New(nodes, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		c.Close()
		for _, n := range nodes {
			n.Close()
		}
	})
	return c
}

// holding returns the indexes of the nodes whose key holds value, leaving
// out the nodes in skip (for example those that are down).
func (ns *nodes) holding(t *testing.T, key, value string, skip ...int) []int {
	t.Helper()
	return ns.find(t, key, func(v string) bool { return v == value }, skip)
}

// inLine returns on how many nodes the line of waiters of key (as stored,
// under the prefix "lock:") has one waiter. (A round is not sent to a node
// whose earlier requests are still in flight once its outcome is decided,
// so a waiter may miss a node's line.)
func (ns *nodes) inLine(t *testing.T, key string) int {
	n := 0
	for _, d := range ns.direct {
		if d.ZCard(t.Context(), "lock:"+protocol.LinePrefix+strings.TrimPrefix(key, "lock:")).Val() == 1 {
			n++
		}
	}
	return n
}

// present returns the indexes of the nodes where key is held, leaving out
// the nodes in skip: it exists and is not a release's tombstone (free for
// every other token).
func (ns *nodes) present(t *testing.T, key string, skip ...int) []int {
	t.Helper()
	return ns.find(t, key, func(v string) bool { return !strings.HasPrefix(v, "redquorum:gone:") }, skip)
}

func (ns *nodes) find(t *testing.T, key string, match func(string) bool, skip []int) []int {
	t.Helper()
	var idx []int
	for i, cl := range ns.direct {
		if slices.Contains(skip, i) {
			continue
		}
		v, err := cl.Get(t.Context(), key).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		require.NoError(t, err, "GET %s on node %d", key, i)
		if match(unmarked(v)) {
			idx = append(idx, i)
		}
	}
	return idx
}

// each runs fn on the given nodes in parallel and fails t on any error. It
// does not use t.Context, so that it works in t.Cleanup.
func (ns *nodes) each(t *testing.T, idx []int, fn func(*rig.Node, context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errs := make([]error, len(idx))
	var wg sync.WaitGroup
	for j, i := range idx {
		wg.Go(func() { errs[j] = fn(ns.c.Nodes[i], ctx) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
}

// TestIntegration runs the core's public behaviours against five real masters.
func TestIntegration(t *testing.T) {
	ns := startNodes(t, 5, "", "")
	// Subtests share the cluster: each leaves every node up and fast.

	t.Run("LockUnlock", func(t *testing.T) {
		c := ns.client(t, nil)
		l, err := c.TryLock(t.Context(), "it:lock", 10*time.Second)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, len(ns.holding(t, "it:lock", l.Token())), 3, "the token is on a quorum when Lock returns")
		require.Eventually(t, func() bool { return len(ns.holding(t, "it:lock", l.Token())) == 5 },
			5*time.Second, 10*time.Millisecond, "without faults every node ends up holding the token")
		require.NoError(t, l.Unlock(t.Context()))
		assert.LessOrEqual(t, len(ns.present(t, "it:lock")), 2, "the key is gone from a quorum when Unlock returns")
		c.Close() // waits for the releases still on their way
		assert.Empty(t, ns.present(t, "it:lock"), "no node keeps the key after Unlock")
		require.ErrorIs(t, l.Unlock(t.Context()), redlock.ErrNotHeld, "a second Unlock")
	})

	t.Run("MajorityPartitioned", func(t *testing.T) {
		// Three of five nodes are cut off: the round fails, and its release
		// is sent after the acquire's timeout. Both requests are held by
		// the network and delivered when the partition heals, in either
		// order, so the late SET can land after its release. Here the
		// release times out inside the partition too and is never
		// delivered; the Client sends it again in the background until a
		// node answers it (Close makes one last attempt at once). Its
		// answer deletes the key, or leaves a tombstone that refuses the
		// late SET: nothing is left that nobody holds.
		const ttl = 2 * time.Second
		c := ns.client(t, &redlock.Options{NodeTimeout: 100 * time.Millisecond})
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		l, err := c.Lock(ctx, "it:part", ttl) // opens a connection to every node
		require.NoError(t, err)
		require.NoError(t, l.Unlock(t.Context()))
		for _, i := range []int{0, 1, 2} {
			ns.c.Nodes[i].Partition()
			t.Cleanup(ns.c.Nodes[i].Heal)
		}
		_, err = c.TryLock(t.Context(), "it:part", ttl)
		require.ErrorIs(t, err, redlock.ErrNotObtained)
		time.Sleep(500 * time.Millisecond) // the release round (2 × NodeTimeout) times out as well
		for _, i := range []int{0, 1, 2} {
			ns.c.Nodes[i].Heal()
		}
		c.Close()
		time.Sleep(100 * time.Millisecond)
		assert.Empty(t, ns.present(t, "it:part"), "a failed round left a key behind once the partition healed")
		// And a late SET that comes later still is refused by the tombstone.
		time.Sleep(500 * time.Millisecond)
		assert.Empty(t, ns.present(t, "it:part"), "a late SET landed after the release")
	})

	t.Run("SlowNodeDoesNotSlowTheRound", func(t *testing.T) {
		const delay = 300 * time.Millisecond // each way: a round trip to a slow node takes ≥ 600ms
		c := ns.client(t, &redlock.Options{NodeTimeout: 5 * time.Second})
		for _, i := range []int{1, 3} {
			ns.c.Nodes[i].SetLatency(delay)
			t.Cleanup(func() { ns.c.Nodes[i].SetLatency(0) })
		}
		lockBegan := time.Now()
		l, err := c.TryLock(t.Context(), "it:slow", 10*time.Second)
		lockTook := time.Since(lockBegan)
		require.NoError(t, err)
		until := l.Until() // before Unlock, which ends it
		unlockBegan := time.Now()
		require.NoError(t, l.Unlock(t.Context()))
		unlockTook := time.Since(unlockBegan)
		assert.Less(t, lockTook, 2*delay, "TryLock waited for a slow node")
		assert.Less(t, unlockTook, 2*delay, "Unlock waited for a slow node")
		assert.Greater(t, until.Sub(lockBegan), 10*time.Second-clock.Drift(10*time.Second, redlock.DefaultDriftFactor)-2*delay,
			"the validity reflects the fast round, not the slow nodes")
		c.Close()
		assert.Empty(t, ns.present(t, "it:slow"), "the slow nodes got their release too")
	})

	t.Run("StaleTokenAfterExpiry", func(t *testing.T) {
		c := ns.client(t, nil)
		a, err := c.TryLock(t.Context(), "it:stale", 500*time.Millisecond)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return len(ns.present(t, "it:stale")) == 0 }, 5*time.Second, 10*time.Millisecond)
		b, err := ns.client(t, nil).TryLock(t.Context(), "it:stale", 10*time.Second) // c's Close releases its own locks
		require.NoError(t, err)
		require.ErrorIs(t, a.Extend(t.Context(), 10*time.Second), redlock.ErrNotHeld)
		require.ErrorIs(t, a.Unlock(t.Context()), redlock.ErrNotHeld)
		c.Close()
		// TryLock returns at the quorum: the last node's grant may land
		// after, but a's calls must not take any of b's keys away.
		assert.Eventually(t, func() bool { return len(ns.holding(t, "it:stale", b.Token())) == 5 }, 5*time.Second, 10*time.Millisecond,
			"the new holder's keys are untouched")
	})

	t.Run("StaleTokenOnTheNodes", func(t *testing.T) {
		// The nodes lose A's keys while A still trusts its validity (as
		// after a node clock jump); B takes the lock. A's Extend and
		// Unlock reach the nodes, fail, and leave B's keys alone.
		c := ns.client(t, nil)
		a, err := c.TryLock(t.Context(), "it:stale2", time.Minute)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return len(ns.holding(t, "it:stale2", a.Token())) == 5 },
			5*time.Second, 10*time.Millisecond)
		for _, cl := range ns.direct {
			require.NoError(t, cl.Del(t.Context(), "it:stale2").Err())
		}
		b, err := ns.client(t, nil).TryLock(t.Context(), "it:stale2", time.Minute)
		require.NoError(t, err)
		require.Eventually(t, func() bool { return len(ns.holding(t, "it:stale2", b.Token())) == 5 },
			5*time.Second, 10*time.Millisecond)

		until := a.Until()
		err = a.Extend(t.Context(), time.Minute)
		require.ErrorIs(t, err, redlock.ErrNotHeld)
		var e *redlock.Error
		require.ErrorAs(t, err, &e)
		assert.Zero(t, e.OK, "no node extended a stale token")
		assert.Equal(t, until, a.Until(), "a failed Extend leaves Until alone")
		require.ErrorIs(t, a.Unlock(t.Context()), redlock.ErrNotHeld)
		c.Close()
		assert.Len(t, ns.holding(t, "it:stale2", b.Token()), 5, "the new holder's keys are untouched")
		ttl, err := ns.direct[0].PTTL(t.Context(), "it:stale2").Result()
		require.NoError(t, err)
		assert.Greater(t, ttl, 30*time.Second, "the stale Extend did not touch the new holder's TTL")
		require.NoError(t, b.Unlock(t.Context()))
	})

	t.Run("IdempotentReacquire", func(t *testing.T) {
		// The acquire script treats "already holds my token" as granted and
		// resets the TTL: a retried or duplicated request cannot make the
		// owner fail on its own key.
		node, ctx := ns.direct[0], t.Context()
		keys := []string{"it:idem", protocol.StateKey}   // the lock key, then the node's state
		p := protocol.New(0, false, protocol.Kernel, "") // restart guard off, no fence
		run := func(token string, ttl int) (int64, error) {
			return p.RunInt(ctx, node, p.AcquireCmd(protocol.Acquire{Keys: keys, Token: token, TTL: time.Duration(ttl) * time.Millisecond}))
		}
		v, err := run("token-a", 1000)
		require.NoError(t, err)
		require.Zero(t, v)
		v, err = run("token-a", 60000)
		require.NoError(t, err)
		require.Zero(t, v, "the same token acquires again")
		ttl, err := node.PTTL(ctx, "it:idem").Result()
		require.NoError(t, err)
		assert.Greater(t, ttl, 10*time.Second, "the repeated acquire reset the TTL")
		v, err = run("token-b", 1000)
		require.NoError(t, err)
		assert.Greater(t, v, int64(10000), "another token is refused with the holder's remaining TTL")
		assert.Equal(t, []int{0}, ns.holding(t, "it:idem", "token-a"))
		require.NoError(t, node.Del(ctx, "it:idem").Err())
	})

	t.Run("ValidityBound", func(t *testing.T) {
		rc := &roundClock{}
		c := ns.client(t, &redlock.Options{Clock: rc, NodeTimeout: time.Second})
		// A first lock establishes a fresh deployment's restart guard,
		// which takes an extra round.
		warm, err := c.Lock(t.Context(), "it:warm", time.Second)
		require.NoError(t, err)
		require.NoError(t, warm.Unlock(t.Context()))
		for _, lat := range []time.Duration{0, 10 * time.Millisecond} {
			for _, ttl := range []time.Duration{200 * time.Millisecond, time.Second, time.Minute} {
				for _, n := range ns.c.Nodes {
					n.SetLatency(lat)
				}
				rc.arm()
				l, err := c.TryLock(t.Context(), "it:validity", ttl)
				require.NoError(t, err, "ttl %v latency %v", ttl, lat)
				start, end := rc.readings()
				validity := l.Until().Sub(start)
				assert.LessOrEqual(t, validity, ttl-clock.Drift(ttl, redlock.DefaultDriftFactor), "ttl %v latency %v", ttl, lat)
				assert.Equal(t, clock.Validity(ttl, end.Sub(start), redlock.DefaultDriftFactor), validity, "validity = ttl − elapsed − drift")
				for _, n := range ns.c.Nodes {
					n.SetLatency(0)
				}
				// Every node that holds the key keeps it at least until Until:
				// the key expires no later than the reply's arrival + PTTL
				// (+1ms of rounding), so that bound below Until is a breach.
				for _, i := range ns.holding(t, "it:validity", l.Token()) {
					pttl, err := ns.direct[i].PTTL(t.Context(), "it:validity").Result()
					latest := time.Now().Add(pttl + time.Millisecond)
					require.NoError(t, err)
					if pttl > 0 {
						assert.False(t, latest.Before(l.Until()), "node %d expires the key before Until", i)
					}
				}
				require.NoError(t, l.Unlock(t.Context()))
			}
		}
	})

	// Last: the killed nodes come back empty, and their restart guard then
	// keeps them out for a minute.
	t.Run("MinorityDown", func(t *testing.T) {
		c := ns.client(t, nil)
		ns.each(t, []int{0, 1}, (*rig.Node).Kill)
		t.Cleanup(func() { ns.each(t, []int{0, 1, 2}, (*rig.Node).Start) })

		l, err := c.TryLock(t.Context(), "it:down", 10*time.Second)
		require.NoError(t, err, "two of five nodes down: three still grant")
		assert.Equal(t, []int{2, 3, 4}, ns.holding(t, "it:down", l.Token(), 0, 1))
		require.NoError(t, l.Unlock(t.Context()))

		ns.each(t, []int{2}, (*rig.Node).Kill)
		_, err = c.TryLock(t.Context(), "it:down", 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrNotObtained, "three of five nodes down: no quorum")
		var e *redlock.Error
		require.ErrorAs(t, err, &e)
		for i := range 3 {
			assert.Error(t, e.Nodes[i].Err, "node %d is down", i)
		}

		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		_, err = c.Lock(ctx, "it:down", 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrNotObtained)
		require.ErrorIs(t, err, context.DeadlineExceeded)

		c.Close() // waits for the releases of the failed rounds
		assert.Empty(t, ns.present(t, "it:down", 0, 1, 2), "a failed round leaves no key on the live nodes")
	})
}

// roundClock is the real clock, recording its readings since arm. A lock
// round reads it at its start and at its end (without fencing), so the last
// two readings after a successful TryLock are the start and the end of the
// round that obtained the lock.
type roundClock struct {
	mu    sync.Mutex
	times []time.Time
}

func (c *roundClock) arm() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.times = c.times[:0]
}

func (c *roundClock) readings() (start, end time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.times)
	if n < 2 {
		return time.Time{}, time.Time{}
	}
	return c.times[n-2], c.times[n-1]
}

func (c *roundClock) Now() time.Time {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.times = append(c.times, now)
	return now
}

func (c *roundClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// aclArgs is the least-privilege ACL of the README: the default user is off,
// "locker" may run only the lock scripts (EVALSHA, with EVAL as the fallback)
// and the commands inside them, on keys under "lock:" (the lock keys and the
// node's state lock:redquorum:node), and may subscribe to and publish the
// release announcements that wake waiting Lock calls; "admin" is for the
// test's inspection.
var aclArgs = []string{
	"--user", "default", "off",
	"--user", "locker", "on", ">locker-secret", "resetkeys", "~lock:*",
	"resetchannels", "&redquorum:released:lock:*", "&redquorum:waiting:*",
	"-@all", "+evalsha", "+eval", "+get", "+set", "+pttl", "+pexpire", "+del", "+exists",
	"+hget", "+hset", "+hsetnx", "+hdel", "+zadd", "+zrem", "+zpopmin", "+zrange", "+time", "+info", "+publish", "+subscribe", "+unsubscribe", "+ping", "+multi", "+exec",
	"--user", "admin", "on", ">admin-secret", "~*", "&*", "+@all",
}

// TestACL shows that the least-privilege user of the README is enough for
// every operation, and that it is really restricted.
func TestACL(t *testing.T) {
	ns := startNodes(t, 5, "admin", "admin-secret", rig.WithArgs(aclArgs...))
	var nodes []redis.UniversalClient
	for _, addr := range ns.c.Addrs() {
		o := redlock.NodeOptions(addr)
		o.Username, o.Password = "locker", "locker-secret"
		cl := redis.NewClient(o)
		t.Cleanup(func() { cl.Close() })
		nodes = append(nodes, cl)
	}
	ctx := t.Context()

	// Fencing and the restart guard (on by default) use the node state key
	// lock:redquorum:node and the hash commands.
	c, err := redlock.New(nodes, &redlock.Options{KeyPrefix: "lock:", NodeTimeout: time.Second, Fencing: true})
	require.NoError(t, err)
	l, err := c.TryLock(ctx, "acl", 10*time.Second)
	require.NoError(t, err, "lock as the least-privilege user")
	assert.NotZero(t, l.Fence(), "a fencing token as the least-privilege user")
	require.NoError(t, l.Extend(ctx, 20*time.Second), "extend as the least-privilege user")

	// A second client waits; it subscribes to the release announcements,
	// and the unlock's announcement wakes it.
	waiter, err := redlock.New(nodes, &redlock.Options{KeyPrefix: "lock:", NodeTimeout: time.Second, Fencing: true,
		MinRetryDelay: 10 * time.Second, MaxRetryDelay: 10 * time.Second})
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		wl, err := waiter.Lock(ctx, "acl", time.Second)
		if err == nil {
			err = wl.Unlock(ctx)
		}
		got <- err
	}()
	for i, n := range ns.c.Nodes {
		admin := ns.direct[i]
		require.Eventually(t, func() bool {
			return admin.PubSubNumSub(ctx, "redquorum:released:lock:acl").Val()["redquorum:released:lock:acl"] > 0
		}, 10*time.Second, 10*time.Millisecond,
			"the waiting client subscribed on %s", n.Name())
	}
	require.Eventually(t, func() bool { return ns.inLine(t, "lock:acl") > len(nodes)/2 }, 10*time.Second, 10*time.Millisecond,
		"the waiting client joined the line of waiters on a quorum of nodes")
	require.NoError(t, l.Unlock(ctx), "unlock as the least-privilege user")
	select {
	case err := <-got:
		require.NoError(t, err, "the waiter obtained the lock after the announced release")
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter slept through the release: its retry delay is 10s")
	}
	require.NoError(t, waiter.Close())

	// Without fencing, a waiter whose client is subscribed to its own
	// channel (from its first wait on) joins for a handoff: the unlock
	// hands the key off on the nodes, and the waiter holds it without a
	// round (the hand value is its token).
	holder, err := redlock.New(nodes, &redlock.Options{KeyPrefix: "lock:", NodeTimeout: time.Second})
	require.NoError(t, err)
	defer holder.Close()
	waiter, err = redlock.New(nodes, &redlock.Options{KeyPrefix: "lock:", NodeTimeout: time.Second,
		MinRetryDelay: 10 * time.Second, MaxRetryDelay: 10 * time.Second})
	require.NoError(t, err)
	defer waiter.Close()
	handedOff := false
	for try := 0; try < 3 && !handedOff; try++ { // the first wait subscribes the waiter's hand channel
		l, err := holder.TryLock(ctx, "acl", 10*time.Second)
		require.NoError(t, err)
		got := make(chan string, 1)
		go func() {
			wl, err := waiter.Lock(ctx, "acl", 10*time.Second)
			if err != nil {
				got <- err.Error()
				return
			}
			got <- wl.Token()
			_ = wl.Unlock(ctx)
		}()
		for i := range ns.c.Nodes {
			admin := ns.direct[i]
			require.Eventually(t, func() bool {
				return len(admin.PubSubChannels(ctx, "redquorum:waiting:*").Val()) == 1
			}, 10*time.Second, 10*time.Millisecond, "the waiter's channel subscribed")
		}
		require.Eventually(t, func() bool { return ns.inLine(t, "lock:acl") > len(nodes)/2 }, 10*time.Second, 10*time.Millisecond,
			"the waiter joined the line on a quorum of nodes")
		require.NoError(t, l.Unlock(ctx))
		select {
		case tok := <-got:
			handedOff = strings.HasPrefix(tok, protocol.HandPrefix)
		case <-time.After(5 * time.Second):
			t.Fatal("the waiter slept through the release: its retry delay is 10s")
		}
		settle := time.Now().Add(time.Second)
		for time.Now().Before(settle) && len(ns.present(t, "lock:acl")) > 0 {
			time.Sleep(10 * time.Millisecond) // the waiter's unlock
		}
	}
	assert.True(t, handedOff, "a lock was handed off on the nodes to the least-privilege user")

	// An election's record lies under the prefix, and its announcements go
	// on the release channels: Observe hears a new value at once, not at
	// its reads at the leader's TTL.
	lead, err := c.Election("acl-election").Campaign(ctx, "v1", 10*time.Second)
	require.NoError(t, err, "campaign as the least-privilege user")
	octx, stopObserving := context.WithCancel(ctx)
	seen := waiter.Election("acl-election").Observe(octx)
	require.Equal(t, "v1", (<-seen).Value, "the leader as the least-privilege user sees it")
	record := protocol.ReleasedChannel + "lock:" + protocol.LeaderPrefix + "acl-election"
	require.Eventually(t, func() bool {
		n := 0
		for _, admin := range ns.direct {
			if admin.PubSubNumSub(ctx, record).Val()[record] > 0 {
				n++
			}
		}
		return n > len(nodes)/2
	}, 10*time.Second, 10*time.Millisecond, "the observer subscribed to the record's channel on a quorum of nodes")
	require.NoError(t, lead.Proclaim(ctx, "v2"), "proclaim as the least-privilege user")
	select {
	case info := <-seen:
		assert.Equal(t, "v2", info.Value)
	case <-time.After(5 * time.Second):
		t.Fatal("Observe missed the announcement of the new value")
	}
	require.NoError(t, lead.Resign(ctx), "resign as the least-privilege user")
	stopObserving()
	for range seen {
	}

	// Every node had the scripts loaded from above (EVALSHA fallback to
	// EVAL); a node restarted empty needs EVAL again.
	require.NoError(t, ns.c.Nodes[0].Restart(ctx))
	l, err = c.TryLock(ctx, "acl", time.Second)
	require.NoError(t, err, "lock after a node lost its script cache")
	require.NoError(t, l.Unlock(ctx))
	c.Close()
	assert.Empty(t, ns.present(t, "lock:acl"))

	// The user is restricted: keys outside lock:* and other commands fail.
	c, err = redlock.New(nodes, &redlock.Options{NodeTimeout: time.Second})
	require.NoError(t, err)
	_, err = c.TryLock(ctx, "acl", time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.ErrorContains(t, err, "NOPERM", "a key outside lock:* is refused")
	c.Close()
	locker := nodes[1].(*redis.Client)
	assert.ErrorContains(t, locker.Keys(ctx, "*").Err(), "NOPERM")
	assert.ErrorContains(t, locker.FlushAll(ctx).Err(), "NOPERM")
	assert.ErrorContains(t, locker.Publish(ctx, "other", "x").Err(), "NOPERM", "other channels are refused")
	assert.ErrorContains(t, locker.Eval(ctx, "return redis.call('INCR', KEYS[1])", []string{"lock:x"}).Err(), "can't run this command",
		"scripts cannot run commands outside the list")
	assert.Empty(t, ns.present(t, "acl"))
}

// unmarked returns v, a value read from a lock key, without the mark of a
// key waited for (see internal/protocol/acquire.lua).
func unmarked(v string) string {
	v, _ = protocol.Holding(v)
	return v
}
