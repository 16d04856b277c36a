package redlock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
)

// TestQueueOneRoundPerAcquisition shows that callers of one Client on one key
// take turns: every acquisition costs exactly one round, where callers that
// competed with each other would also send failed rounds.
func TestQueueOneRoundPerAcquisition(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	cl := c.client(t, &Options{MinRetryDelay: time.Millisecond, MaxRetryDelay: 2 * time.Millisecond})
	const callers, rounds = 4, 5
	var (
		wg           sync.WaitGroup
		mu           sync.Mutex
		inside, most int
		shares       [callers]int
	)
	before := c.hooks[0].calls.Load()
	for w := range callers {
		wg.Go(func() {
			for range rounds {
				l, err := cl.Lock(t.Context(), "k", 5*time.Second)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				inside++
				most = max(most, inside)
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				inside--
				shares[w]++
				mu.Unlock()
				assert.NoError(t, l.Unlock(t.Context()))
			}
		})
	}
	wg.Wait()
	require.NoError(t, cl.Close())
	assert.Equal(t, 1, most)
	for w, n := range shares {
		assert.Equal(t, rounds, n, "caller %d", w)
	}
	// One acquire and one release per acquisition on each node, plus the
	// EVAL that loads each script after NOSCRIPT, plus a few rounds lost to
	// a release that had not reached a node yet on a slow machine. Callers
	// that competed would send about one failed round per acquisition.
	assert.LessOrEqual(t, c.hooks[0].calls.Load()-before, int64(2*callers*rounds+2+2*callers))
	assert.Zero(t, cl.queue.Keys(), "no queue is left once every caller is done")
}

// TestQueueHolderExpires shows that a holder that never unlocks keeps its
// turn only until its validity has passed.
func TestQueueHolderExpires(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	cl := c.client(t, &Options{MinRetryDelay: time.Millisecond, MaxRetryDelay: 5 * time.Millisecond})
	first, err := cl.Lock(t.Context(), "k", 300*time.Millisecond)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	second, err := cl.Lock(ctx, "k", 10*time.Second)
	require.NoError(t, err, "the waiter takes over once the first lock's validity has passed")
	assert.False(t, time.Now().Before(first.Until()), "not before the first lock's validity ended")

	assert.ErrorIs(t, first.Unlock(t.Context()), ErrNotHeld)
	// The late Unlock did not hand the second holder's turn to anyone.
	short, cancel2 := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel2()
	_, err = cl.Lock(short, "k", time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	require.NoError(t, second.Unlock(t.Context()))
	third, err := cl.Lock(t.Context(), "k", time.Second)
	require.NoError(t, err)
	require.NoError(t, third.Unlock(t.Context()))
}

// TestQueueWaiterGivesUp checks the errors of a wait that ends in the queue
// and that the queue still works afterwards.
func TestQueueWaiterGivesUp(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	cl := c.client(t, nil)
	l, err := cl.Lock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	c.waitHolders(t, "k", l.Token(), 3)
	before := c.hooks[0].calls.Load()

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err = cl.Lock(ctx, "k", time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Contains(t, e.Reason, "waited behind other callers of this Client")
	assert.Equal(t, before, c.hooks[0].calls.Load(), "a queued caller sends nothing")

	require.NoError(t, l.Unlock(t.Context()))
	l, err = cl.Lock(t.Context(), "k", time.Second)
	require.NoError(t, err, "the queue is free again")
	require.NoError(t, l.Unlock(t.Context()))
}

func TestQueueClose(t *testing.T) {
	leakcheck.Check(t)
	cl, l, done := holderAndWaiter(t)
	require.NoError(t, l.Unlock(t.Context()) /* before Close, as documented */)
	// The waiter got the turn and obtains the lock, or Close stopped it.
	require.NoError(t, cl.Close())
	if err := <-done; err != nil {
		assert.True(t, errors.Is(err, ErrClosed), "%v", err)
	}
}

func TestQueueCloseWakesWaiters(t *testing.T) {
	leakcheck.Check(t)
	cl, _, done := holderAndWaiter(t)
	require.NoError(t, cl.Close())
	assert.ErrorIs(t, <-done, ErrClosed)
}

// holderAndWaiter returns a Client in which one caller holds "k" and a
// second waits in the queue; done receives the second Lock's error.
func holderAndWaiter(t *testing.T) (*Client, *Lock, <-chan error) {
	t.Helper()
	c := newCluster(t, 3)
	cl := c.client(t, nil)
	l, err := cl.Lock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := cl.Lock(t.Context(), "k", time.Second)
		done <- err
	}()
	require.Eventually(t, func() bool { return cl.queue.Waiting("k") == 1 }, 5*time.Second, time.Millisecond)
	return cl, l, done
}

// waitQueued waits until n callers of cl wait behind the owner of key.
func waitQueued(t *testing.T, cl *Client, key string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return cl.queue.Waiting(key) == n }, 5*time.Second, time.Millisecond, "%d callers queued for %s", n, key)
}

// releasesOf returns the release commands for token that node i saw, and how
// many of them were unlocks (announced) rather than clean-ups (which the
// handoff strategy announces too, ending in "n").
func releasesOf(c *cluster, i int, token string) (all, unlocks int) {
	for _, cmd := range c.hooks[i].commands() {
		sha, _, _ := strings.Cut(strings.TrimPrefix(cmd, "[evalsha "), " ")
		if at := strings.Index(cmd, " "+token+" "); scripts.Release.Is(sha) && at >= 0 {
			all++
			if strings.Contains(cmd[at:], reservedKey) && !strings.HasSuffix(cmd, " n]") { // announced: the state key follows the token
				unlocks++
			}
		}
	}
	return all, unlocks
}

// holdWithWaiter locks "k" on every node of c with cl and starts a second
// Lock of cl on it, which waits in the local queue; its lock comes on got.
func holdWithWaiter(t *testing.T, c *cluster, cl *Client) (*Lock, <-chan *Lock) {
	t.Helper()
	a, err := cl.Lock(t.Context(), "k", 10*time.Second)
	require.NoError(t, err)
	c.waitHolders(t, "k", a.Token(), len(c.srv))
	got := make(chan *Lock, 1)
	go func() {
		b, err := cl.Lock(t.Context(), "k", 10*time.Second)
		assert.NoError(t, err)
		got <- b
	}()
	waitQueued(t, cl, "k", 1)
	return a, got
}

// TestHandOver: Unlock with another caller of the Client waiting hands the
// lock over: no release is sent where the waiter's round took the keys
// over; where it did not (node 4 refuses acquires), the old token is
// released afterwards.
func TestHandOver(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 5)
	cl := c.client(t, nil)
	a, got := holdWithWaiter(t, c, cl)
	c.hooks[4].selectCmds(isScript(scripts.Acquire))
	c.hooks[4].set(nil, errBroken)
	require.NoError(t, a.Unlock(t.Context()))
	b := <-got
	require.NotNil(t, b)
	settle(cl)
	assert.Equal(t, 4, c.holders("k", b.Token()))
	assert.Zero(t, c.holders("k", a.Token()), "a's keys left behind")
	assert.False(t, held(c.srv[4], "k"), "a's key on the node that refused b")
	for i := range 4 {
		n, _ := releasesOf(c, i, a.Token())
		assert.Zero(t, n, "releases of a sent to node %d, which b took over", i)
	}
	n, _ := releasesOf(c, 4, a.Token())
	assert.Equal(t, 1, n, "releases of a sent to node 4")
	c.hooks[4].set(nil, nil)
	require.NoError(t, b.Unlock(t.Context()))
	require.NoError(t, cl.Close())
	assert.Zero(t, c.keys("k"))
}

// TestHandOverRoundFails: when the waiter's first round after a handover
// fails, the handed-over lock is released on every node, and the waiter
// goes on with ordinary rounds.
func TestHandOverRoundFails(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 5)
	cl := c.client(t, &Options{MinRetryDelay: time.Millisecond, MaxRetryDelay: 2 * time.Millisecond})
	a, got := holdWithWaiter(t, c, cl)
	for _, h := range c.hooks[2:] {
		h.selectCmds(isScript(scripts.Acquire))
		h.set(nil, errBroken)
	}
	require.NoError(t, a.Unlock(t.Context()))
	c.waitHolders(t, "k", a.Token(), 0)
	for _, h := range c.hooks[2:] {
		h.set(nil, nil)
	}
	b := <-got
	require.NotNil(t, b)
	require.NoError(t, b.Unlock(t.Context()))
	require.NoError(t, cl.Close())
	assert.Zero(t, c.keys("k"))
}

// TestHandOverLimit: after maxHandovers handovers in a row an Unlock releases
// the key on the nodes and announces it, for waiters in other processes.
func TestHandOverLimit(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	cl := c.client(t, nil)
	first, err := cl.Lock(t.Context(), "k", 10*time.Second)
	require.NoError(t, err)
	const waiters = maxHandovers + 1
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		tokens = []string{first.Token()}
	)
	for i := range waiters {
		wg.Go(func() {
			l, err := cl.Lock(t.Context(), "k", 10*time.Second)
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			tokens = append(tokens, l.Token())
			mu.Unlock()
			assert.NoError(t, l.Unlock(t.Context()))
		})
		waitQueued(t, cl, "k", i+1) // in this order
	}
	require.NoError(t, first.Unlock(t.Context()))
	wg.Wait()
	require.NoError(t, cl.Close())
	require.Len(t, tokens, waiters+1)
	var announced []bool
	for _, tok := range tokens {
		n := 0
		for i := range c.srv { // a node that refused the holder gets no release
			_, u := releasesOf(c, i, tok)
			n += u
		}
		announced = append(announced, n > 0)
	}
	// first, w1, w2 hand over; w3 releases; w4 finds nobody waiting.
	assert.Equal(t, []bool{false, false, false, true, true}, announced, "announced releases per holder, in order")
	assert.Zero(t, c.keys("k"))
}
