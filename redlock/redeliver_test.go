package redlock

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
)

// redeliverDelays sets the redelivery delays of c's clients.
func redeliverDelays(c *cluster, first, max time.Duration) {
	c.tune = func(t *tunables) { t.redeliverFirst, t.redeliverMax = first, max }
}

// lockOnAll locks key and waits until every node holds it.
func lockOnAll(t *testing.T, c *cluster, cl *Client, key string, ttl time.Duration) *Lock {
	t.Helper()
	l, err := cl.Lock(t.Context(), key, ttl)
	require.NoError(t, err)
	c.waitHolders(t, key, l.Token(), len(c.srv))
	return l
}

// countScript counts the commands of script s that h saw.
func countScript(h *faultHook, s testScript) int {
	n := 0
	for _, a := range h.commands() {
		if sha, ok := strings.CutPrefix(a, "[evalsha "); ok && s.Is(strings.Fields(sha)[0]) {
			n++
		}
	}
	return n
}

// TestRedeliverRelease: an Unlock whose release to one node gets no answer
// succeeds on the quorum; the node keeps the key only until it answers the
// release, sent again in the background, and is not sent it after that.
func TestRedeliverRelease(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	redeliverDelays(c, 5*time.Millisecond, 20*time.Millisecond)
	cl := c.client(t, nil)
	l := lockOnAll(t, c, cl, "k", time.Minute)
	h := c.hooks[2]
	h.selectCmds(isScript(scripts.Release))
	h.set(nil, errBroken)
	require.NoError(t, l.Unlock(t.Context()))
	// While the node does not answer, the release is tried again and again,
	// and the key stays.
	require.Eventually(t, func() bool { return countScript(h, scripts.Release) >= 4 }, 5*time.Second, time.Millisecond)
	assert.True(t, held(c.srv[2], "k"))
	h.set(nil, nil)
	c.waitHolders(t, "k", l.Token(), 0)
	settle(cl) // the retries end once the node has answered
	n := countScript(h, scripts.Release)
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, n, countScript(h, scripts.Release), "a release the node answered was sent again")
}

// lateHook is a network that holds a node's acquires and delivers them
// later, when heal is called, after the Client has given up on them (it
// returns a timeout to the Client at once); while partitioned, it also fails
// the releases.
type lateHook struct {
	node        *redis.Client // a connection of its own, for the late delivery
	mu          sync.Mutex
	partitioned bool
	held        [][]any
	delivered   atomic.Int64
}

func (h *lateHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.intercept(cmd); err != nil {
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *lateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return interceptPipeline(next, h.intercept)
}

func (h *lateHook) intercept(cmd redis.Cmder) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.partitioned {
		return nil
	}
	var err error = errBroken
	if isScript(scripts.Acquire)(cmd) {
		h.held = append(h.held, cmd.Args())
		err = context.DeadlineExceeded
	}
	cmd.SetErr(err)
	return err
}

// heal ends the partition and, when deliver is set, delivers the held
// acquires.
func (h *lateHook) heal(t *testing.T, deliver bool) {
	h.mu.Lock()
	h.partitioned = false
	held := h.held
	if deliver {
		h.held = nil
	}
	h.mu.Unlock()
	if !deliver {
		return
	}
	for _, args := range held {
		_, err := runScript(context.Background(), h.node, args)
		require.NoError(t, err)
		h.delivered.Add(1)
	}
}

// TestRedeliverLateSet is a partition that holds a failed round's acquires
// and swallows its releases. Once it heals, whichever comes first, the late
// acquire or the release sent again, no key is left that nobody holds: the
// release deletes the key, or leaves a tombstone that refuses the acquire.
func TestRedeliverLateSet(t *testing.T) {
	for _, releaseFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("releaseFirst=%v", releaseFirst), func(t *testing.T) {
			leakcheck.Check(t)
			c := newCluster(t, 3)
			redeliverDelays(c, 5*time.Millisecond, 20*time.Millisecond)
			cl := c.client(t, &Options{NodeTimeout: 200 * time.Millisecond})
			hooks := make([]*lateHook, 3)
			for i := 1; i < 3; i++ {
				side := redis.NewClient(&redis.Options{Addr: c.srv[i].Addr()})
				t.Cleanup(func() { _ = side.Close() })
				hooks[i] = &lateHook{node: side, partitioned: true}
				c.nodes[i].AddHook(hooks[i])
			}
			_, err := cl.TryLock(t.Context(), "k", time.Minute)
			require.ErrorIs(t, err, ErrNotObtained)
			require.Eventually(t, func() bool { return c.keys("k") == 0 }, 5*time.Second, time.Millisecond, "node 0's grant was not released")
			for i := 1; i < 3; i++ {
				if releaseFirst {
					hooks[i].heal(t, false)
					require.Eventually(t, func() bool { return c.srv[i].Exists("k") }, 5*time.Second, time.Millisecond, "no tombstone")
					hooks[i].mu.Lock()
					hooks[i].partitioned = true // the held acquire only
					hooks[i].mu.Unlock()
				}
			}
			for i := 1; i < 3; i++ {
				hooks[i].heal(t, true)
				require.EqualValues(t, 1, hooks[i].delivered.Load())
			}
			require.Eventually(t, func() bool { return c.keys("k") == 0 }, 5*time.Second, time.Millisecond,
				"a key nobody holds is left after the partition healed")
			settle(cl)
			assert.Zero(t, c.keys("k"))
		})
	}
}

// TestRedeliverOnClose: Close makes one last attempt, at once, for the
// releases in doubt, and gives up on a node that still does not answer
// (its key then expires with its TTL).
func TestRedeliverOnClose(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 5)
	redeliverDelays(c, time.Hour, time.Hour) // no retry before Close
	var logs logBuffer
	cl := c.client(t, &Options{Logger: logs.logger()})
	a := lockOnAll(t, c, cl, "a", time.Minute)
	b := lockOnAll(t, c, cl, "b", time.Minute)
	for _, h := range c.hooks[3:] {
		h.selectCmds(isScript(scripts.Release))
		h.set(nil, errBroken)
	}
	require.NoError(t, a.Unlock(t.Context()))
	require.NoError(t, b.Unlock(t.Context()))
	require.Eventually(t, func() bool { return c.keys("a") == 2 && c.keys("b") == 2 }, 5*time.Second, time.Millisecond)
	// Unlock returns at its quorum: wait until the failed releases have
	// been queued for redelivery, rather than fail during Close.
	cl.life.workers.Wait()
	c.hooks[3].set(nil, nil) // node 3 answers again, node 4 does not
	began := time.Now()
	require.NoError(t, cl.Close())
	assert.Less(t, time.Since(began), 5*time.Second)
	assert.False(t, held(c.srv[3], "a") || held(c.srv[3], "b"), "Close did not deliver the releases in doubt")
	assert.True(t, held(c.srv[4], "a") && held(c.srv[4], "b"))
	assert.Contains(t, logs.String(), "Close could not deliver releases in doubt")
	assert.Contains(t, logs.String(), "count=2")
}

// TestRedeliverGivesUp: the retries of a node that never answers end once
// the lock's TTL has passed, when its key has expired anyway.
func TestRedeliverGivesUp(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	redeliverDelays(c, 5*time.Millisecond, 20*time.Millisecond)
	cl := c.client(t, &Options{NodeTimeout: 100 * time.Millisecond})
	const ttl = 300 * time.Millisecond
	l := lockOnAll(t, c, cl, "k", ttl)
	h := c.hooks[2]
	h.selectCmds(isScript(scripts.Release))
	h.set(nil, errBroken)
	began := time.Now()
	require.NoError(t, l.Unlock(t.Context()))
	settle(cl)
	took := time.Since(began)
	assert.GreaterOrEqual(t, took, ttl, "gave up before the TTL")
	assert.Less(t, took, ttl+2*time.Second)
	n := countScript(h, scripts.Release)
	assert.Greater(t, n, 3)
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, n, countScript(h, scripts.Release), "still retrying after the TTL")
}

// TestRedeliverAnswers: an error reply is an answer: the release is not
// sent again.
func TestRedeliverAnswers(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	redeliverDelays(c, time.Millisecond, time.Millisecond)
	cl := c.client(t, nil)
	l := lockOnAll(t, c, cl, "k", time.Minute)
	h := c.hooks[2]
	h.selectCmds(isScript(scripts.Release))
	h.set(nil, redisErr("NOPERM this user has no permissions to run the 'evalsha' command"))
	require.NoError(t, l.Unlock(t.Context()))
	settle(cl)
	time.Sleep(20 * time.Millisecond)
	assert.Equal(t, 1, countScript(h, scripts.Release))
}

// TestRedeliveryLimit: a node's backlog keeps the newest releases and warns
// once when it overflows.
func TestRedeliveryLimit(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	c.tune = func(t *tunables) { t.redeliverFirst, t.redeliverMax, t.redeliveryLimit = time.Hour, time.Hour, 2 }
	var logs logBuffer
	cl := c.client(t, &Options{Logger: logs.logger()})
	h := c.hooks[2]
	h.selectCmds(isScript(scripts.Release))
	var locks []*Lock
	for _, k := range []string{"a", "b", "c", "d"} {
		locks = append(locks, lockOnAll(t, c, cl, k, time.Minute))
	}
	h.set(nil, errBroken)
	for _, l := range locks {
		require.NoError(t, l.Unlock(t.Context()))
		// Unlock returns at its quorum: wait for the release to node 2 to
		// fail and be queued, so that the backlog's order is the unlocks'.
		cl.life.workers.Wait()
	}
	require.Equal(t, 4, countScript(h, scripts.Release))
	h.set(nil, nil)
	require.NoError(t, cl.Close()) // the last attempt: the two newest
	for k, want := range map[string]bool{"a": true, "b": true, "c": false, "d": false} {
		assert.Equal(t, want, held(c.srv[2], k), k)
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "too many releases in doubt"))
}

// redisErr is an error reply from a node.
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

// TestReleaseOnClosedNodeClients: a Lock unlocked after its node clients
// were closed cannot be released; Unlock says so, and the Client warns
// once per node (instead of retrying in the background) that the node
// clients must be closed after the Client.
func TestReleaseOnClosedNodeClients(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	var logs logBuffer
	cl := c.client(t, &Options{Logger: logs.logger()})
	l := lockOnAll(t, c, cl, "k", time.Minute)
	l2 := lockOnAll(t, c, cl, "k2", time.Minute)
	for _, n := range c.nodes {
		require.NoError(t, n.Close())
	}
	require.ErrorIs(t, l.Unlock(t.Context()), ErrNotHeld)
	require.ErrorIs(t, l2.Unlock(t.Context()), ErrNotHeld)
	settle(cl)
	assert.Equal(t, 3, strings.Count(logs.String(), "the node client is closed"), "one warning per node: %s", logs.String())
	assert.Contains(t, logs.String(), "level=WARN")
}

// TestRedeliverDuringClose: a release that fails after Close has begun
// (Close waits for it) is sent once more before Close returns, instead of
// being dropped: an acquire that the node executes late would otherwise
// leave its key there until the TTL.
func TestRedeliverDuringClose(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	cl := c.client(t, nil)
	l := lockOnAll(t, c, cl, "k", time.Minute)
	h := c.hooks[2]
	h.selectCmds(isScript(scripts.Release))
	h.set(nil, errBroken)
	open := h.block() // node 2's release waits, then fails
	require.NoError(t, l.Unlock(t.Context()), "a quorum released")
	closed := make(chan error, 1)
	go func() { closed <- cl.Close() }()
	require.Eventually(t, func() bool {
		select {
		case <-cl.life.closing:
			return true
		default:
			return false
		}
	}, 5*time.Second, time.Millisecond, "Close has begun")
	h.set(nil, nil) // the node answers from now on
	open()
	require.NoError(t, <-closed)
	assert.False(t, held(c.srv[2], "k"), "the release that failed during Close was dropped")
}
