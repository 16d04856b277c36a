package redlock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/leakcheck"
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
	assert.Empty(t, cl.turns.queues, "no queue is left once every caller is done")
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
	require.Eventually(t, func() bool {
		cl.turns.mu.Lock()
		defer cl.turns.mu.Unlock()
		return len(cl.turns.queues["k"].waiting) == 1
	}, 5*time.Second, time.Millisecond)
	return cl, l, done
}
