package redlock

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/protocol"
)

func TestSemaphoreTryAcquire(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	cl := c.client(t, nil)
	sem := cl.Semaphore("reports", 2)
	p1, err := sem.TryAcquire(ctx, time.Second)
	require.NoError(t, err)
	p2, err := sem.TryAcquire(ctx, time.Second)
	require.NoError(t, err)
	assert.NotEqual(t, p1.Slot(), p2.Slot())
	_, err = sem.TryAcquire(ctx, time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	require.ErrorIs(t, err, ErrTaken)
	hs, err := sem.Holders(ctx)
	require.NoError(t, err)
	require.Len(t, hs, 2)
	assert.ElementsMatch(t, []int{p1.Slot(), p2.Slot()}, []int{hs[0].Slot, hs[1].Slot})
	assert.Equal(t, cl.cfg.owner, hs[0].Owner)
	require.NoError(t, p1.Extend(ctx, 2*time.Second))
	ttl, err := p1.TTL(ctx)
	require.NoError(t, err)
	assert.Greater(t, ttl, time.Second)
	require.NoError(t, p1.Release(ctx))
	assert.True(t, p1.Until().IsZero())
	p3, err := sem.TryAcquire(ctx, time.Second)
	require.NoError(t, err)
	assert.Equal(t, p1.Slot(), p3.Slot(), "the only free slot")
	require.NoError(t, p2.Release(ctx))
	require.NoError(t, p3.Release(ctx))
	require.ErrorIs(t, p3.Release(ctx), ErrNotHeld)
	var nilPermit *Permit
	require.ErrorIs(t, nilPermit.Release(ctx), ErrNotHeld)
	assert.Equal(t, -1, nilPermit.Slot())
}

// TestSemaphoreOneRoundTrip: uncontended, Acquire and Release, and RLock
// and Unlock, each send one command to each node, as a lock does.
func TestSemaphoreOneRoundTrip(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	cl := c.client(t, nil)
	// sent counts the commands sent to the nodes that name one of the
	// name's keys, but an EVAL after NOSCRIPT: the warm-up's round, decided
	// at its quorum, may not have sent its acquire to the third node, which
	// then lacks the script.
	sent := func(name string) (n int) {
		for _, h := range c.hooks {
			for _, cmd := range h.commands() {
				if strings.Contains(cmd, name+":") && !strings.HasPrefix(cmd, "[eval ") {
					n++
				}
			}
		}
		return n
	}
	// Once first, so that the connections are made and checked and the
	// scripts loaded.
	warm, err := cl.Semaphore("warm", 3).Acquire(ctx, time.Second)
	require.NoError(t, err)
	require.NoError(t, warm.Release(ctx))
	r, err := cl.RWMutex("warm").RLock(ctx, time.Second)
	require.NoError(t, err)
	require.NoError(t, r.Unlock(ctx))

	p, err := cl.Semaphore("reports", 3).Acquire(ctx, time.Second)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return sent("reports") >= 3 }, 5*time.Second, time.Millisecond) // the third node's may follow the decision
	assert.Equal(t, 3, sent("reports"), "one acquire per node")
	require.NoError(t, p.Release(ctx))
	require.Eventually(t, func() bool { return sent("reports") >= 6 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, 6, sent("reports"), "one release per node")

	r, err = cl.RWMutex("prices").RLock(ctx, time.Second)
	require.NoError(t, err)
	require.NoError(t, r.Unlock(ctx))
	require.Eventually(t, func() bool { return sent("prices") >= 6 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, 6, sent("prices"), "RLock and Unlock: one command per node each")
}

// TestSemaphoreBound: many callers on two Clients never hold more than
// the limit at once, and do reach it.
func TestSemaphoreBound(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	opts := func() *Options { return &Options{MinRetryDelay: time.Millisecond, MaxRetryDelay: 5 * time.Millisecond} }
	clients := []*Client{c.client(t, opts()), c.client(t, opts())}
	const limit = 3
	var in, most atomic.Int32
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			sem := clients[g%2].Semaphore("reports", limit)
			for range 5 {
				p, err := sem.Acquire(ctx, 5*time.Second)
				if !assert.NoError(t, err) {
					return
				}
				n := in.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				time.Sleep(20 * time.Millisecond)
				in.Add(-1)
				assert.NoError(t, p.Release(ctx))
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, most.Load(), int32(limit), "more holders than the limit")
	assert.Equal(t, int32(limit), most.Load(), "the limit was never reached: the test shows nothing")
}

func TestSemaphoreLimitMismatch(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	a, b := c.client(t, nil), c.client(t, nil)
	p, err := a.Semaphore("reports", 3).TryAcquire(ctx, time.Second)
	require.NoError(t, err)
	for _, limit := range []int{4, 2} {
		_, err = b.Semaphore("reports", limit).TryAcquire(ctx, time.Second)
		require.ErrorIs(t, err, ErrLimitMismatch)
		require.ErrorIs(t, err, ErrNotObtained)
		assert.Contains(t, err.Error(), "limit is "+string(rune('0'+limit)))
		assert.Contains(t, err.Error(), "with limit 3")
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = b.Semaphore("reports", 4).Acquire(wctx, time.Second)
	require.ErrorIs(t, err, ErrLimitMismatch, "Acquire gives up at once")
	require.NoError(t, wctx.Err())
	require.NoError(t, p.Release(ctx))
}

func TestSemaphoreBadInput(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	cl := c.client(t, nil)
	fn := func(context.Context) error { return nil }
	cases := []struct {
		name string
		do   func() error
		want string
	}{
		{"limit 0", func() error { _, err := cl.Semaphore("s", 0).Acquire(ctx, time.Second); return err }, "limit 0"},
		{"limit -1", func() error { _, err := cl.Semaphore("s", -1).TryAcquire(ctx, time.Second); return err }, "limit -1"},
		{"limit too high", func() error { _, err := cl.Semaphore("s", MaxSemaphoreLimit+1).Acquire(ctx, time.Second); return err }, "limit 129"},
		{"empty name", func() error { _, err := cl.Semaphore("", 2).Acquire(ctx, time.Second); return err }, "empty key"},
		{"reserved name", func() error {
			_, err := cl.Semaphore(protocol.SemaphorePrefix+"x", 2).Acquire(ctx, time.Second)
			return err
		}, `"redquorum:sem:x"`},
		{"bad ttl", func() error { _, err := cl.Semaphore("s", 2).Acquire(ctx, -time.Second); return err }, "-1s"},
		{"nil fn", func() error { return cl.DoSemaphore(ctx, "s", 2, time.Second, nil) }, "nil fn"},
		{"Do limit", func() error { return cl.DoSemaphore(ctx, "s", 0, time.Second, fn) }, "limit 0"},
		{"rw empty name", func() error { _, err := cl.RWMutex("").RLock(ctx, time.Second); return err }, "empty key"},
		{"rw reserved", func() error { _, err := cl.RWMutex(protocol.RWMutexPrefix+"x").Lock(ctx, time.Second); return err }, `"redquorum:rw:x"`},
		{"rw bad ttl", func() error { _, err := cl.RWMutex("p").TryLock(ctx, 0); return err }, "0s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	for i, h := range c.hooks {
		assert.Empty(t, h.commands(), "node %d was sent commands", i)
		assert.Equal(t, []string{protocol.StateKey}, c.srv[i].Keys(), "node %d has keys beside its state", i)
	}
	// A lock key under the new prefixes is refused as well.
	_, err := cl.TryLock(ctx, protocol.SemaphorePrefix+"reports:0", time.Second)
	require.ErrorContains(t, err, "reserved")
	_, err = cl.TryLock(ctx, protocol.RWMutexPrefix+"prices:writer", time.Second)
	require.ErrorContains(t, err, "reserved")
}

// TestSemaphoreReleaseWakes: a waiter whose backoff is far longer than
// the test is woken by the release of the slot, and obtains it in a few
// rounds: it does not poll.
func TestSemaphoreReleaseWakes(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	var rounds atomic.Int32
	obs := &Observer{End: func(_ context.Context, e Event) {
		if e.Op == OpAcquire {
			rounds.Store(int32(len(e.Rounds)))
		}
	}}
	slow := &Options{MinRetryDelay: time.Minute, MaxRetryDelay: time.Minute, Observer: obs}
	holder, waiter := c.client(t, nil), c.client(t, slow)
	p, err := holder.Semaphore("reports", 1).Acquire(ctx, 10*time.Second)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		q, err := waiter.Semaphore("reports", 1).Acquire(wctx, 10*time.Second)
		if err == nil {
			err = q.Release(ctx)
		}
		done <- err
	}()
	require.Eventually(t, func() bool { return waiter.waker().Waits() > 0 }, 10*time.Second, time.Millisecond)
	require.NoError(t, p.Release(ctx))
	require.NoError(t, <-done)
	assert.LessOrEqual(t, rounds.Load(), int32(3), "rounds of the woken waiter")
}

func TestRWMutex(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	cl := c.client(t, nil)
	rw := cl.RWMutex("prices")
	r1, err := rw.TryRLock(ctx, time.Second)
	require.NoError(t, err)
	r2, err := rw.RLock(ctx, time.Second)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(r1.Key(), protocol.RWMutexPrefix+"prices:"))
	_, err = rw.TryLock(ctx, time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	r3, err := rw.TryRLock(ctx, time.Second) // TryLock left no intent
	require.NoError(t, err)
	readers, writer, err := rw.Holders(ctx)
	require.NoError(t, err)
	assert.Len(t, readers, 3)
	assert.Zero(t, writer)
	require.NoError(t, r3.Unlock(ctx))

	got := make(chan *Lock, 1)
	go func() {
		w, err := rw.Lock(ctx, time.Second)
		assert.NoError(t, err)
		got <- w
	}()
	require.Eventually(t, func() bool {
		v, _ := c.srv[0].Get(protocol.RWMutexPrefix + "prices:limit")
		return strings.HasPrefix(v, "64w")
	}, 5*time.Second, time.Millisecond)
	_, err = rw.TryRLock(ctx, time.Second)
	require.ErrorIs(t, err, errWriterWaits, "a waiting writer's intent turns new readers away")
	require.NoError(t, r1.Unlock(ctx))
	require.NoError(t, r2.Unlock(ctx))
	w := <-got
	require.NotNil(t, w)
	assert.Equal(t, []string{protocol.RWMutexPrefix + "prices:writer"}, w.Keys(), "the writer locks its key alone")
	readers, writer, err = rw.Holders(ctx)
	require.NoError(t, err)
	assert.Empty(t, readers)
	assert.GreaterOrEqual(t, writer.Nodes, 2, "a quorum agrees on the writer")
	_, err = rw.TryRLock(ctx, time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	require.NoError(t, w.Extend(ctx, time.Second))
	require.NoError(t, w.Unlock(ctx))
	r4, err := rw.TryRLock(ctx, time.Second)
	require.NoError(t, err)
	require.NoError(t, r4.Unlock(ctx))
}

// TestSemaphoreObserved: the Observer sees a permit's and a reader's
// operations as it sees a lock's, with their own Op values.
func TestSemaphoreObserved(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	var mu sync.Mutex
	var ops []string
	obs := &Observer{End: func(_ context.Context, e Event) {
		mu.Lock()
		defer mu.Unlock()
		ops = append(ops, string(e.Op)+":"+string(e.Outcome)+":"+strings.Join(e.Keys, ","))
	}}
	cl := c.client(t, &Options{Observer: obs})
	sem := cl.Semaphore("reports", 1)
	p, err := sem.Acquire(ctx, time.Second)
	require.NoError(t, err)
	_, err = sem.TryAcquire(ctx, time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	require.NoError(t, p.Release(ctx))
	r, err := cl.RWMutex("prices").RLock(ctx, time.Second)
	require.NoError(t, err)
	require.NoError(t, r.Unlock(ctx))
	w, err := cl.RWMutex("prices").TryLock(ctx, time.Second)
	require.NoError(t, err)
	require.NoError(t, w.Unlock(ctx))
	require.NoError(t, cl.DoSemaphore(ctx, "reports", 1, time.Second, func(context.Context) error { return nil }))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{
		"acquire:obtained:reports", "tryacquire:taken:reports", "unlock:released:" + protocol.SemaphorePrefix + "reports:0",
		"rlock:obtained:prices", "unlock:released:" + r.Key(),
		"trywlock:obtained:prices", "unlock:released:" + strings.Join(w.Keys(), ","),
		"acquire:obtained:reports", "unlock:released:" + protocol.SemaphorePrefix + "reports:0", "do:released:reports",
	}, ops)
	assert.True(t, OpAcquire.Obtains() && OpTryWLock.Obtains() && !OpUnlock.Obtains())
}

// TestSemaphoreFenced: with Options.Fencing, a permit carries a fence,
// and the next holder of its slot a larger one.
func TestSemaphoreFenced(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	cl := c.client(t, &Options{Fencing: true})
	sem := cl.Semaphore("reports", 1)
	p, err := sem.Acquire(ctx, time.Second)
	require.NoError(t, err)
	require.NotZero(t, p.Fence())
	require.NoError(t, p.Release(ctx))
	q, err := sem.Acquire(ctx, time.Second)
	require.NoError(t, err)
	assert.Greater(t, q.Fence(), p.Fence())
	require.NoError(t, q.Release(ctx))
	w, err := cl.RWMutex("prices").Lock(ctx, time.Second)
	require.NoError(t, err)
	assert.Greater(t, w.Fence(), q.Fence())
	require.NoError(t, w.Unlock(ctx))
}
