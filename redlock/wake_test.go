package redlock

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/leakcheck"
)

// TestWakeOnUnlock shows that a Lock waiting for a key held by another
// client retries as soon as the holder unlocks: its own retry delay is a
// minute, far beyond the test's deadline.
func TestWakeOnUnlock(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	a := c.client(t, nil)
	b := c.client(t, &Options{MinRetryDelay: time.Minute, MaxRetryDelay: time.Minute, KeyPrefix: ""})
	la, err := a.Lock(t.Context(), "k", time.Minute)
	require.NoError(t, err)

	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		lb, err := b.Lock(ctx, "k", time.Second)
		if err == nil {
			err = lb.Unlock(ctx)
		}
		got <- err
	}()
	waitWaiting(t, b, "k")
	time.Sleep(50 * time.Millisecond) // let the listeners subscribe
	start := time.Now()
	require.NoError(t, la.Unlock(t.Context()))
	require.NoError(t, <-got)
	assert.Less(t, time.Since(start), 5*time.Second, "woken by the release, not by the one-minute retry")
	require.NoError(t, b.Close())
	assert.Empty(t, b.wake.waiters)
}

// TestWakeNotOnFailedRounds shows that the clean-up of a failed round does
// not announce anything: a waiter is not woken by its own or another
// waiter's failed rounds, only by an unlock.
func TestWakeNotOnFailedRounds(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	a := c.client(t, nil)
	la, err := a.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	c.waitHolders(t, "k", la.Token(), 3) // a's requests have all landed
	// b wins node 0 while a holds the others: its failed round releases
	// node 0, which must not wake b into another round.
	require.True(t, c.srv[0].Del("k"))
	b := c.client(t, &Options{MinRetryDelay: time.Minute, MaxRetryDelay: time.Minute})
	scripts := &scriptCounter{}
	c.nodes[1].AddHook(scripts)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, err = b.Lock(ctx, "k", time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, int64(1), scripts.n.Load(), "one round, then the timed wait")
}

// TestWakeListenersStop checks that Close stops the pub/sub listeners, also
// when a node is down.
func TestWakeListenersStop(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	c.srv[2].Close()
	b := c.client(t, nil)
	ch := b.wakeOn("k")
	require.NotNil(t, ch)
	time.Sleep(150 * time.Millisecond) // the listener of node 2 fails and retries
	require.NoError(t, b.Close())
	assert.Nil(t, b.wakeOn("k"), "no listener after Close")
}

// waitWaiting waits until a Lock of cl is registered for key's release.
func waitWaiting(t *testing.T, cl *Client, key string) {
	t.Helper()
	require.Eventually(t, func() bool {
		cl.wake.mu.Lock()
		defer cl.wake.mu.Unlock()
		return cl.wake.waiters[cl.cfg.prefix+key] != nil
	}, 5*time.Second, time.Millisecond)
}

// scriptCounter counts the scripts run on a node.
type scriptCounter struct{ n atomic.Int64 }

func (h *scriptCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if name := cmd.Name(); name == "evalsha" || name == "eval" {
				h.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// TestWakeListenersStopWhenIdle: the listeners run while a Lock waits, stop
// once nobody has waited for wakeIdle, and start again with the next wait,
// which a release then wakes.
func TestWakeListenersStopWhenIdle(t *testing.T) {
	leakcheck.Check(t)
	defer func(d time.Duration) { wakeIdle = d }(wakeIdle)
	wakeIdle = 50 * time.Millisecond
	c := newCluster(t, 3)
	cl := c.client(t, nil)
	running := func() bool {
		cl.wake.mu.Lock()
		defer cl.wake.mu.Unlock()
		return cl.wake.started && len(cl.wake.subs) == 3
	}
	ch := cl.wakeOn("k")
	time.Sleep(4 * wakeIdle)
	assert.True(t, running(), "listeners stopped while a Lock waits")
	cl.wakeDone("k", ch)
	require.Eventually(t, func() bool { return !running() }, 5*time.Second, time.Millisecond, "listeners still running")
	numPat := func() int {
		n := 0
		for _, m := range c.srv {
			n += m.PubSubNumPat()
		}
		return n
	}
	require.Eventually(t, func() bool { return numPat() == 0 }, 5*time.Second, time.Millisecond, "subscriptions left on the nodes")

	holder := c.client(t, nil)
	l, err := holder.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	ch = cl.wakeOn("k")
	require.True(t, running())
	// The listeners subscribe in the background: unlock once they have.
	require.Eventually(t, func() bool { return numPat() == 3 }, 5*time.Second, time.Millisecond)
	require.NoError(t, l.Unlock(t.Context()))
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no wake after the restart of the listeners")
	}
	cl.wakeDone("k", ch)
}
