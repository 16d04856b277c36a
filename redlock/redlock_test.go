package redlock

import (
	"context"
	"errors"
	"fmt"
	"os"
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
	"github.com/redquorum/redquorum/quorum"
)

var errBroken = errors.New("broken node")

func TestLockUnlock(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 5)
	cl := c.client(t, &Options{KeyPrefix: "lock:"})
	before := time.Now()
	l, err := cl.Lock(t.Context(), "stock", 10*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "stock", l.Key())
	host, _ := os.Hostname()
	owner := fmt.Sprintf("%s:%d", host, os.Getpid())
	assert.Equal(t, owner, protocol.Owner(l.Token()), "the default owner is in the token")
	assert.Len(t, l.Token(), protocol.TokenRandomLen+1+len(owner))
	assert.GreaterOrEqual(t, c.holders("lock:stock", l.Token()), 3)
	// Validity never exceeds ttl − drift, counted from before the round.
	assert.True(t, l.Until().Before(before.Add(10*time.Second-clock.Drift(10*time.Second, DefaultDriftFactor)+time.Millisecond)))
	assert.True(t, l.Until().After(time.Now()))

	require.NoError(t, l.Unlock(t.Context()))
	err = l.Unlock(t.Context())
	assert.ErrorIs(t, err, ErrNotHeld, "a second Unlock")
	assert.ErrorIs(t, l.Extend(t.Context(), time.Second), ErrNotHeld, "Extend after Unlock")
	require.NoError(t, cl.Close()) // waits for the releases still in flight
	assert.Equal(t, 0, c.keys("lock:stock"))
	_, err = cl.Lock(t.Context(), "stock", time.Second)
	assert.ErrorIs(t, err, ErrClosed)
}

func TestTryLockTaken(t *testing.T) {
	c := newCluster(t, 5)
	a, b := c.client(t, nil), c.client(t, nil)
	la, err := a.TryLock(t.Context(), "k", 10*time.Second)
	require.NoError(t, err)

	_, err = b.TryLock(t.Context(), "k", 10*time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.ErrorIs(t, err, ErrTaken)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, "lock", e.Op)
	assert.Equal(t, 3, e.Quorum)
	require.Len(t, e.Nodes, 5)
	taken := 0
	for i, n := range e.Nodes {
		assert.Equal(t, c.srv[i].Addr(), n.Addr)
		if errors.Is(n.Err, ErrTaken) {
			taken++
		}
	}
	assert.GreaterOrEqual(t, taken, 3)
	assert.Regexp(t, `^redlock: lock "k": not obtained \(\d of 5 nodes, 3 needed\): held by another owner on \d nodes$`, err.Error())
	var qe *quorum.Error
	assert.ErrorAs(t, err, &qe, "the quorum's per-node errors are reachable too")

	settle(a) // Close would release la
	require.NoError(t, b.Close())
	// b may have won a node before a's late request got there, but it released it.
	assert.GreaterOrEqual(t, c.holders("k", la.Token()), 3)
	assert.Equal(t, c.keys("k"), c.holders("k", la.Token()), "a key other than the holder's was left")
}

func TestNodesDown(t *testing.T) {
	for _, tc := range []struct {
		down   int
		obtain bool
	}{{0, true}, {1, true}, {2, true}, {3, false}, {5, false}} {
		t.Run("", func(t *testing.T) {
			leakcheck.Check(t)
			c := newCluster(t, 5)
			for i := range tc.down {
				c.srv[i].Close()
			}
			cl := c.client(t, nil)
			l, err := cl.TryLock(t.Context(), "k", time.Second)
			if tc.obtain {
				require.NoError(t, err)
				require.NoError(t, l.Unlock(t.Context()))
			} else {
				require.ErrorIs(t, err, ErrNotObtained)
				var e *Error
				require.ErrorAs(t, err, &e)
				for i := range tc.down {
					assert.Error(t, e.Nodes[i].Err, "node %d is down", i)
				}
			}
			require.NoError(t, cl.Close())
			for i := tc.down; i < 5; i++ {
				assert.False(t, held(c.srv[i], "k"), "key left on node %d", i)
			}
		})
	}
}

// TestStalledNodeDoesNotDelay shows that a round decides without the nodes it
// does not need: two nodes are stalled until the test lets them go, yet lock
// and unlock both return.
func TestStalledNodeDoesNotDelay(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 5)
	cl := c.client(t, &Options{NodeTimeout: time.Minute})
	rel3, rel4 := c.hooks[3].block(), c.hooks[4].block()
	l, err := cl.TryLock(t.Context(), "k", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	assert.Equal(t, 0, c.keys("k")-(c.holders("k", l.Token())), "no foreign key")

	// The stalled nodes' SETs land only now; their releases were ordered after them.
	rel3()
	rel4()
	require.NoError(t, cl.Close())
	assert.Equal(t, 0, c.keys("k"), "a late SET outlived the release")
}

// TestBusyNodeNotSent: a node whose requests in flight fill its connection
// pool is not sent an acquire the round does not need. Node 4 has a pool of
// two connections and stalls: the acquires of a and b hold both; c's round
// has its quorum from nodes 0-3 while its acquire waits for a slot, so that
// acquire is never sent, and neither is a release after it.
func TestBusyNodeNotSent(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 5)
	o := NodeOptions(c.srv[4].Addr())
	o.PoolSize = 2
	n4 := redis.NewClient(o)
	t.Cleanup(func() { _ = n4.Close() })
	h := &faultHook{}
	n4.AddHook(h)
	c.nodes[4], c.hooks[4] = n4, h
	cl := c.client(t, &Options{NodeTimeout: time.Minute})
	release := h.block()
	var locks []*Lock
	for _, k := range []string{"a", "b", "c"} {
		l, err := cl.TryLock(t.Context(), k, 10*time.Second)
		require.NoError(t, err, k)
		locks = append(locks, l)
	}
	assert.Equal(t, errNotSent, locks[2].held.calls.Outcome(4), "c's acquire on the busy node")
	for _, l := range locks {
		require.NoError(t, l.Unlock(t.Context()))
	}
	release()
	require.NoError(t, cl.Close())
	perKey := map[string]int{}
	for _, cmd := range h.commands() {
		for _, k := range []string{"a", "b", "c"} {
			if strings.Contains(cmd, " "+k+" ") {
				perKey[k]++
			}
		}
	}
	assert.Zero(t, perKey["c"], "commands for c on the busy node")
	assert.GreaterOrEqual(t, perKey["a"], 2, "a's acquire and release on node 4")
	assert.GreaterOrEqual(t, perKey["b"], 2, "b's acquire and release on node 4")
	for _, k := range []string{"a", "b", "c"} {
		assert.Equal(t, 0, c.keys(k), "key %s left behind", k)
	}
}

// TestLateSetAfterFailedRound: a round fails while one node's SET is still
// outstanding; when that SET lands later, the release follows it.
func TestLateSetAfterFailedRound(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	require.NoError(t, c.srv[0].Set("k", "other"))
	c.hooks[1].set(nil, errBroken)
	release := c.hooks[2].block()
	cl := c.client(t, &Options{NodeTimeout: time.Minute})
	_, err := cl.TryLock(t.Context(), "k", 10*time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.ErrorIs(t, err, ErrTaken)
	assert.ErrorIs(t, err, errBroken)
	assert.False(t, held(c.srv[2], "k"), "the stalled SET has not landed yet")

	release()
	require.NoError(t, cl.Close())
	assert.False(t, held(c.srv[2], "k"), "the late SET outlived the release")
	v, _ := value(c.srv[0], "k")
	assert.Equal(t, "other", v, "another owner's key was touched")
}

func TestRoundTimeoutWithStalledNodes(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	rel1, rel2 := c.hooks[1].block(), c.hooks[2].block()
	cl := c.client(t, &Options{NodeTimeout: 20 * time.Millisecond})
	_, err := cl.TryLock(t.Context(), "k", time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.ErrorIs(t, err, quorum.ErrTimeout)
	rel1()
	rel2()
	require.NoError(t, cl.Close())
	assert.Equal(t, 0, c.keys("k"))
}

// acquireArgs are the acquire script's ARGV after the token and ttl for a
// node out of its guard, without fencing.
var acquireArgs = []any{DefaultRestartGuard.Milliseconds()}

func runAcquire(ctx context.Context, n redis.UniversalClient, key, token string, ttlMS int64) *redis.Cmd {
	return scripts.Acquire.Run(ctx, n, []string{key, reservedKey}, append([]any{token, ttlMS}, acquireArgs...)...)
}

// TestAcquireFreesOnlyHandover: the acquire script counts a key as free when
// it holds the token of the lock handed over (Acquire.Handover), and only then: another token,
// and an empty value with no token handed over, still refuse.
func TestAcquireFreesOnlyHandover(t *testing.T) {
	c := newCluster(t, 1)
	c.establish("")
	n, m := c.nodes[0], c.srv[0]
	acquire := func(key, prev string) any {
		v, err := kernelAcquire(false).Run(t.Context(), n, []string{key, reservedKey}, "new", 10000, DefaultRestartGuard.Milliseconds(), "", prev).Result()
		require.NoError(t, err)
		return v
	}
	for _, tc := range []struct {
		held, prev string
		granted    bool
	}{
		{"old", "old", true},
		{"other", "old", false},
		{"", "", false},
		{"old", "", false},
	} {
		m.FlushAll()
		c.establish("")
		require.NoError(t, m.Set("k", tc.held))
		m.SetTTL("k", 5*time.Second)
		v := acquire("k", tc.prev)
		got, _ := value(m, "k")
		if tc.granted {
			assert.Equal(t, int64(0), v, "%+v", tc)
			assert.Equal(t, "new", got, "%+v", tc)
		} else {
			assert.NotEqual(t, int64(0), v, "%+v", tc)
			assert.Equal(t, tc.held, got, "%+v", tc)
		}
	}
}

// TestTombstone: a release that finds its key missing leaves a tombstone
// for its token, so that the token's SET, arriving late (a partition that
// delayed it), is refused instead of leaving a key nobody holds; any other
// token takes the key as free; the tombstone expires with the lock's TTL.
func TestTombstone(t *testing.T) {
	c := newCluster(t, 1)
	c.establish("")
	n, m := c.nodes[0], c.srv[0]
	release := func(token string) {
		_, err := scripts.Release.Run(t.Context(), n, []string{"k"}, token, 2000).Result()
		require.NoError(t, err)
	}
	release("late")
	assert.False(t, held(m, "k"))
	assert.True(t, m.Exists("k"), "no tombstone")
	assert.InDelta(t, 2.0, m.TTL("k").Seconds(), 0.1, "the tombstone lives as long as the lock")

	v, err := runAcquire(t.Context(), n, "k", "late", 10000).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(-3), v, "the late SET of a released token")
	assert.False(t, held(m, "k"), "the late SET took the key")

	v, err = runAcquire(t.Context(), n, "k", "other", 10000).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(0), v, "another token finds the key free")
	got, _ := value(m, "k")
	assert.Equal(t, "other", got)
	assert.InDelta(t, 10.0, m.TTL("k").Seconds(), 0.1, "the TTL of the holder")

	// The key keeps the tombstone while another token holds it, and after.
	v, err = runAcquire(t.Context(), n, "k", "late", 10000).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(-3), v, "the late SET, while another token holds the key")
	release("other")
	raw, err := m.Get("k")
	require.NoError(t, err)
	assert.Equal(t, protocol.TombstonePrefix+"late", raw, "the release of the holder leaves the tombstone it kept")
	v, err = runAcquire(t.Context(), n, "k", "late", 10000).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(-3), v, "the late SET, after the holder's release")

	// A release of a key that keeps no tombstone deletes it and leaves nothing.
	v, err = runAcquire(t.Context(), n, "k2", "other", 10000).Result()
	require.NoError(t, err)
	require.Equal(t, int64(0), v)
	_, err = scripts.Release.Run(t.Context(), n, []string{"k2"}, "other", 2000).Result()
	require.NoError(t, err)
	assert.False(t, m.Exists("k2"))
}

func TestIdempotentAcquire(t *testing.T) {
	c := newCluster(t, 1)
	c.establish("")
	ctx := t.Context()
	n := c.nodes[0]
	v, err := runAcquire(ctx, n, "k", "tok", 1000).Int64()
	require.NoError(t, err)
	assert.Equal(t, int64(0), v)
	c.srv[0].SetTTL("k", 400*time.Millisecond) // 600 ms of its TTL pass
	// A retried acquire with the same token is granted and resets the TTL.
	v, err = runAcquire(ctx, n, "k", "tok", 1000).Int64()
	require.NoError(t, err)
	assert.Equal(t, int64(0), v)
	assert.Greater(t, c.srv[0].TTL("k"), 900*time.Millisecond)
	// Another token is told the holder's remaining TTL.
	v, err = runAcquire(ctx, n, "k", "other", 1000).Int64()
	require.NoError(t, err)
	assert.InDelta(t, 1000, v, 100)
	// A key without expiry is reported as -1.
	require.NoError(t, c.srv[0].Set("forever", "x"))
	v, err = runAcquire(ctx, n, "forever", "tok", 1000).Int64()
	require.NoError(t, err)
	assert.Equal(t, int64(-1), v)
}

// TestValidity drives the round's duration with a fake clock that a node
// moves forward while it answers.
func TestValidity(t *testing.T) {
	const ttl = 100 * time.Millisecond // drift allowance: 1ms + 2ms
	for _, tc := range []struct {
		name    string
		elapsed time.Duration
		want    time.Duration // validity; ≤ 0: not obtained
	}{
		{"instant", 0, 97 * time.Millisecond},
		{"slow round", 90 * time.Millisecond, 7 * time.Millisecond},
		{"round eats the margin", 97 * time.Millisecond, 0},
		{"round eats the ttl", 150 * time.Millisecond, -53 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3)
			fc := clock.NewFake(time.Unix(1000, 0))
			// The first command to reach any node moves the clock: every
			// answer, so the round's decision, comes after it.
			var once sync.Once
			for _, h := range c.hooks {
				h.set(func() { once.Do(func() { fc.Advance(tc.elapsed) }) }, nil)
			}
			cl := c.client(t, &Options{Clock: fc, NodeTimeout: time.Minute})
			start := fc.Now()
			l, err := cl.TryLock(t.Context(), "k", ttl)
			if tc.want > 0 {
				require.NoError(t, err)
				assert.Equal(t, start.Add(tc.want), l.Until())
				return
			}
			require.ErrorIs(t, err, ErrNotObtained)
			assert.Contains(t, err.Error(), "the round took too long")
			require.NoError(t, cl.Close())
			assert.Equal(t, 0, c.keys("k"), "granted nodes were not released")
		})
	}
}

func TestExtend(t *testing.T) {
	c := newCluster(t, 5)
	fc := clock.NewFake(time.Unix(1000, 0))
	cl := c.client(t, &Options{Clock: fc})
	l, err := cl.TryLock(t.Context(), "k", time.Second)
	require.NoError(t, err)
	c.waitHolders(t, "k", l.Token(), 5)
	fc.Advance(500 * time.Millisecond)
	require.NoError(t, l.Extend(t.Context(), 5*time.Second))
	assert.Equal(t, fc.Now().Add(5*time.Second-clock.Drift(5*time.Second, DefaultDriftFactor)), l.Until())
	require.Eventually(t, func() bool {
		for _, m := range c.srv {
			if m.TTL("k") < 4*time.Second {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "every node extended")

	// Three nodes lose the key (taken over after expiry, say): Extend fails,
	// Until stays, and the two nodes that still hold the token keep it.
	for i := range 3 {
		require.NoError(t, c.srv[i].Set("k", "someone else"))
	}
	until := l.Until()
	err = l.Extend(t.Context(), 5*time.Second)
	require.ErrorIs(t, err, ErrNotHeld)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, "extend", e.Op)
	assert.Equal(t, until, l.Until())
	assert.Equal(t, 2, c.holders("k", l.Token()), "a failed Extend deleted a key")
	assert.Equal(t, 3, c.holders("k", "someone else"))
}

func TestExtendAfterValidityRanOut(t *testing.T) {
	c := newCluster(t, 3)
	fc := clock.NewFake(time.Unix(1000, 0))
	cl := c.client(t, &Options{Clock: fc})
	l, err := cl.TryLock(t.Context(), "k", time.Second)
	require.NoError(t, err)
	c.waitHolders(t, "k", l.Token(), 3) // the round's late requests have landed
	fc.Advance(time.Second)
	before := c.hooks[0].calls.Load()
	err = l.Extend(t.Context(), time.Second)
	require.ErrorIs(t, err, ErrNotHeld)
	assert.Contains(t, err.Error(), "validity ran out")
	assert.Equal(t, before, c.hooks[0].calls.Load(), "Extend contacted a node after local validity ran out")
}

func TestStaleUnlockLeavesNewHolder(t *testing.T) {
	c := newCluster(t, 5)
	a, b := c.client(t, nil), c.client(t, nil)
	// A TTL that no round under load outlasts: a's keys expire on the nodes
	// (the test deletes them) while its Unlock finds its lock still valid
	// and asks them.
	la, err := a.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	c.waitHolders(t, "k", la.Token(), 5)
	for _, m := range c.srv {
		m.Del("k") // a's keys expire
	}
	lb, err := b.TryLock(t.Context(), "k", 10*time.Second)
	require.NoError(t, err)
	c.waitHolders(t, "k", lb.Token(), 5)

	assert.ErrorIs(t, la.Unlock(t.Context()), ErrNotHeld)
	require.NoError(t, a.Close())
	assert.Equal(t, 5, c.holders("k", lb.Token()), "a stale Unlock touched the new holder's keys")
	require.NoError(t, lb.Unlock(t.Context()))
}

func TestLockWaitsForHolder(t *testing.T) {
	c := newCluster(t, 5)
	a := c.client(t, nil)
	// Retry delays far beyond the holder's TTL: only the TTL the nodes report
	// lets Lock succeed before its deadline.
	b := c.client(t, &Options{MinRetryDelay: time.Minute, MaxRetryDelay: time.Minute})
	_, err := a.TryLock(t.Context(), "k", 150*time.Millisecond)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	lb, err := b.Lock(ctx, "k", time.Second)
	require.NoError(t, err)
	require.NoError(t, lb.Unlock(t.Context()))
}

func TestLockContextEnds(t *testing.T) {
	c := newCluster(t, 3)
	a, b := c.client(t, nil), c.client(t, nil)
	_, err := a.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(30*time.Millisecond, cancel)
	_, err = b.Lock(ctx, "k", time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.ErrorIs(t, err, context.Canceled)

	ctx, cancel2 := context.WithTimeout(t.Context(), 30*time.Millisecond)
	defer cancel2()
	_, err = b.Lock(ctx, "k", time.Second)
	assert.ErrorIs(t, err, ErrNotObtained)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestCloseEndsLockWait: a Lock waiting between its rounds returns
// ErrClosed as soon as its Client is closed, not at its next round (a fake
// clock that never moves: without the close case the wait never ends).
func TestCloseEndsLockWait(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	a := c.client(t, nil)
	fc := clock.NewFake(time.Unix(1000, 0))
	b := c.client(t, &Options{Clock: fc})
	_, err := a.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := b.Lock(context.Background(), "k", time.Second)
		done <- err
	}()
	require.Eventually(t, func() bool { return fc.Waiters() > 0 }, 5*time.Second, time.Millisecond, "Lock waits for its retry")
	require.NoError(t, b.Close())
	select {
	case err := <-done:
		assert.ErrorIs(t, err, ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("Lock still waiting after Close")
	}
}

func TestLockMaxWait(t *testing.T) {
	c := newCluster(t, 3)
	a := c.client(t, nil)
	fc := clock.NewFake(time.Unix(1000, 0))
	b := c.client(t, &Options{Clock: fc, MaxWait: time.Second, MinRetryDelay: 10 * time.Millisecond, MaxRetryDelay: 10 * time.Millisecond})
	_, err := a.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := b.Lock(context.Background(), "k", time.Second)
		done <- err
	}()
	// Let the fake time run until Lock gives up; each step fires the pending retry.
	for {
		select {
		case err := <-done:
			require.ErrorIs(t, err, ErrNotObtained)
			assert.Contains(t, err.Error(), "gave up after Options.MaxWait 1s")
			return
		case <-time.After(time.Millisecond):
			fc.Advance(10 * time.Millisecond)
		}
	}
}

func TestMutualExclusion(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 5)
	const workers, rounds = 6, 10
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		inside  int
		maxIn   int
		counter int
	)
	for w := range workers {
		cl := c.client(t, &Options{MinRetryDelay: time.Millisecond, MaxRetryDelay: 5 * time.Millisecond})
		wg.Go(func() {
			for range rounds {
				l, err := cl.Lock(t.Context(), "stock", 5*time.Second)
				if !assert.NoError(t, err, "worker %d", w) {
					return
				}
				mu.Lock()
				inside++
				maxIn = max(maxIn, inside)
				mu.Unlock()
				v := counter
				time.Sleep(100 * time.Microsecond)
				counter = v + 1
				mu.Lock()
				inside--
				mu.Unlock()
				assert.NoError(t, l.Unlock(t.Context()))
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 1, maxIn)
	assert.Equal(t, workers*rounds, counter)
}

func TestNewValidation(t *testing.T) {
	c := newCluster(t, 3)
	dup := redis.NewClient(NodeOptions(c.srv[0].Addr()))
	t.Cleanup(func() { _ = dup.Close() })
	for _, tc := range []struct {
		name  string
		nodes []redis.UniversalClient
		opts  *Options
		msg   string
	}{
		{"no nodes", nil, nil, "redlock: no nodes"},
		{"nil node", []redis.UniversalClient{c.nodes[0], nil, c.nodes[2]}, nil, "nodes[1] is nil"},
		{"same client", []redis.UniversalClient{c.nodes[0], c.nodes[1], c.nodes[0]}, nil, "nodes[2] is the same client as nodes[0]"},
		{"same address", []redis.UniversalClient{c.nodes[0], c.nodes[1], dup}, nil, "nodes[2] and nodes[0] both address " + c.srv[0].Addr()},
		{"minority quorum", c.nodes, &Options{Quorum: 1}, "Options.Quorum 1 is not a majority of 3 nodes: want 2 to 3"},
		{"quorum above N", c.nodes, &Options{Quorum: 4}, "Options.Quorum 4 is not a majority"},
		{"unknown waiting", c.nodes, &Options{Waiting: 7}, "Options.Waiting Waiting(7) is not one of"},
		{"handoff with fencing", c.nodes, &Options{Waiting: WaitHandoff, Fencing: true}, "Options.Waiting WaitHandoff needs the lock that a release hands off to carry no fence"},
		{"negative quorum", c.nodes, &Options{Quorum: -1}, "Options.Quorum -1"},
		{"negative drift", c.nodes, &Options{DriftFactor: -0.1}, "Options.DriftFactor -0.1 is outside [0, 0.5)"},
		{"drift too large", c.nodes, &Options{DriftFactor: 0.5}, "Options.DriftFactor 0.5"},
		{"negative timeout", c.nodes, &Options{NodeTimeout: -time.Second}, "Options.NodeTimeout -1s is negative"},
		{"negative retry", c.nodes, &Options{MinRetryDelay: -1}, "Options.MinRetryDelay -1ns is negative"},
		{"retry bounds crossed", c.nodes, &Options{MinRetryDelay: time.Second, MaxRetryDelay: time.Millisecond}, "Options.MinRetryDelay 1s is above MaxRetryDelay 1ms"},
		{"negative max wait", c.nodes, &Options{MaxWait: -time.Second}, "Options.MaxWait -1s is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := New(tc.nodes, tc.opts)
			require.Error(t, err)
			assert.Nil(t, cl)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
	cl, err := New(c.nodes, &Options{Quorum: 3})
	require.NoError(t, err)
	require.NoError(t, cl.Close())
}

func TestArgValidation(t *testing.T) {
	c := newCluster(t, 3)
	cl := c.client(t, nil)
	for _, tc := range []struct {
		key string
		ttl time.Duration
		msg string
	}{
		{"", time.Second, "redlock: empty key"},
		{"k", 0, "ttl 0s is not positive"},
		{"k", -time.Second, "ttl -1s is not positive"},
		{"k", 500 * time.Microsecond, "ttl 500µs is below the nodes' 1ms resolution"},
		{"k", 2 * time.Millisecond, "ttl 2ms is too small"},
	} {
		_, err := cl.TryLock(t.Context(), tc.key, tc.ttl)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.msg)
		assert.NotErrorIs(t, err, ErrNotObtained, "bad input is not a failed lock")
		_, err = cl.Lock(t.Context(), tc.key, tc.ttl)
		assert.Contains(t, err.Error(), tc.msg)
	}
	assert.Equal(t, 0, c.keys(""), "bad input left a key behind")
	l, err := cl.TryLock(t.Context(), "k", time.Second)
	require.NoError(t, err)
	assert.Contains(t, l.Extend(t.Context(), 0).Error(), "ttl 0s is not positive")
}

// TestNodeWarnings: a node client used as given is warned about for the
// settings that work against the algorithm; one that New makes a client of
// its own from is not, since that client has the settings.
func TestNodeWarnings(t *testing.T) {
	c := newCluster(t, 3)
	careless := redis.NewClient(&redis.Options{Addr: c.srv[2].Addr()})
	t.Cleanup(func() { _ = careless.Close() })
	warnings := func(opts *Options) string {
		var logs logBuffer
		opts.Logger = logs.logger()
		cl, err := New([]redis.UniversalClient{c.nodes[0], c.nodes[1], careless}, opts)
		require.NoError(t, err)
		require.NoError(t, cl.Close())
		return logs.String()
	}
	out := warnings(&Options{NodeClientsAsGiven: true})
	assert.Contains(t, out, "MaxRetries is 3")
	assert.Contains(t, out, "ContextTimeoutEnabled is false")
	assert.Contains(t, out, "node="+c.srv[2].Addr())
	assert.NotContains(t, out, "node="+c.srv[0].Addr(), "a node built with NodeOptions was warned about")
	assert.Empty(t, warnings(&Options{}), "a derived client was warned about")
}
