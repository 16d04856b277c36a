package test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/redlock"
)

// holdCounter counts the callers inside a critical section and keeps the
// most seen at once.
type holdCounter struct{ in, most atomic.Int32 }

func (h *holdCounter) enter() {
	n := h.in.Add(1)
	for m := h.most.Load(); n > m && !h.most.CompareAndSwap(m, n); m = h.most.Load() {
	}
}

func (h *holdCounter) leave() { h.in.Add(-1) }

// TestSemaphoreRealServers: on five real redis-server masters, 12 callers
// on four Clients never hold a semaphore of limit 3 more than three at
// once, and do reach three; a Client with another limit fails with an
// error that names both limits and holds nothing while the others hold.
func TestSemaphoreRealServers(t *testing.T) {
	leakcheck.Check(t)
	addrs, direct := five(t)
	ctx := t.Context()
	const limit = 3
	var clients []*redlock.Client
	for i := range 4 {
		// A node timeout far above the nodes' answers, so that a busy
		// machine's slow answer does not fail a release that the test
		// needs to succeed.
		clients = append(clients, open(t, addrs, &redlock.Options{Owner: "c" + strconv.Itoa(i), MaxRetryDelay: 20 * time.Millisecond, NodeTimeout: time.Second}))
	}
	var h holdCounter
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			sem := clients[g%4].Semaphore("{reports}", limit)
			for range 8 {
				p, err := sem.Acquire(ctx, 10*time.Second)
				if !assert.NoError(t, err) {
					return
				}
				h.enter()
				time.Sleep(10 * time.Millisecond)
				h.leave()
				assert.NoError(t, p.Release(ctx))
			}
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, h.most.Load(), int32(limit), "more holders than the limit")
	assert.Equal(t, int32(limit), h.most.Load(), "the limit was never reached: the test shows nothing")

	// A Client that disagrees on the limit: while limit-3 holders hold,
	// its every slot, slot 3 included, is refused.
	held, err := clients[0].Semaphore("{reports}", limit).Acquire(ctx, 10*time.Second)
	require.NoError(t, err)
	other := open(t, addrs, nil).Semaphore("{reports}", limit+1)
	_, err = other.TryAcquire(ctx, 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrLimitMismatch)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.ErrorContains(t, err, "this Client's limit is 4, but")
	assert.ErrorContains(t, err, "nodes hold it with limit 3")
	for _, d := range direct {
		for i := range limit + 1 {
			v, _ := d.Get(ctx, "redquorum:sem:{reports}:"+strconv.Itoa(i)).Result()
			if i != held.Slot() && !strings.HasPrefix(v, "redquorum:gone:") {
				assert.Empty(t, v, "slot %d", i)
			}
		}
		assert.Equal(t, "3", d.Get(ctx, "redquorum:sem:{reports}:limit").Val())
	}
	require.NoError(t, held.Release(ctx))
}

// TestRWMutexRealServers: on five real masters, readers hold a read-write
// lock together; a writer excludes readers and writers; and a writer gets
// in under a steady stream of readers: once its intent is on the nodes,
// each reader goroutine is let in at most once more (the round it had in
// flight), not again and again.
func TestRWMutexRealServers(t *testing.T) {
	leakcheck.Check(t)
	addrs, _ := five(t)
	ctx := t.Context()
	opts := func() *redlock.Options { return &redlock.Options{MaxRetryDelay: 20 * time.Millisecond} }
	a, b := open(t, addrs, opts()), open(t, addrs, opts())
	rw, rwB := a.RWMutex("{prices}"), b.RWMutex("{prices}")

	var readers []*redlock.Lock
	for i := range 5 {
		r, err := []*redlock.RWMutex{rw, rwB}[i%2].TryRLock(ctx, 10*time.Second)
		require.NoError(t, err, "reader %d", i)
		readers = append(readers, r)
	}
	_, err := rwB.TryLock(ctx, 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "a writer while readers hold")
	for _, r := range readers {
		require.NoError(t, r.Unlock(ctx))
	}
	w, err := rw.TryLock(ctx, 10*time.Second)
	require.NoError(t, err)
	_, err = rwB.TryRLock(ctx, 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "a reader while a writer holds")
	_, err = rwB.TryLock(ctx, 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "a second writer")
	require.NoError(t, w.Unlock(ctx))

	// A steady stream of readers, and a writer.
	stop := make(chan struct{})
	var writing atomic.Bool
	var afterIntent, overlaps atomic.Int32
	var h holdCounter
	var wg sync.WaitGroup
	const streams = 6
	for g := range streams {
		wg.Go(func() {
			m := []*redlock.RWMutex{rw, rwB}[g%2]
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := m.RLock(ctx, 10*time.Second)
				if !assert.NoError(t, err) {
					return
				}
				if writing.Load() {
					afterIntent.Add(1)
				}
				h.enter()
				time.Sleep(15 * time.Millisecond)
				h.leave()
				assert.NoError(t, r.Unlock(ctx))
			}
		})
	}
	time.Sleep(100 * time.Millisecond) // the readers overlap
	writing.Store(true)
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	w, err = rwB.Lock(wctx, 10*time.Second)
	require.NoError(t, err, "the writer never got in")
	if h.in.Load() != 0 {
		overlaps.Add(1)
	}
	got := afterIntent.Load()
	time.Sleep(30 * time.Millisecond)
	if h.in.Load() != 0 {
		overlaps.Add(1)
	}
	require.NoError(t, w.Unlock(ctx))
	close(stop)
	wg.Wait()
	assert.Zero(t, overlaps.Load(), "a reader held with the writer")
	assert.Greater(t, h.most.Load(), int32(1), "readers never held together")
	assert.LessOrEqual(t, got, int32(2*streams), "readers let in while the writer waited")
	t.Logf("readers let in while the writer waited: %d", got)
}

// TestRWMutexBlindWriterNegativeControl: the node-side check that turns a
// writer away while a reader holds a slot is what excludes them. A writer
// that skips it (the kernel's plain lock of the writer key, through a
// Client whose KeyPrefix ends where the read-write lock's key names
// begin) is granted while readers hold, on the same real masters that
// refuse the RWMutex's writer.
func TestRWMutexBlindWriterNegativeControl(t *testing.T) {
	leakcheck.Check(t)
	addrs, _ := five(t)
	ctx := t.Context()
	rw := open(t, addrs, nil).RWMutex("{blind}")
	blind := open(t, addrs, &redlock.Options{KeyPrefix: "redquorum:rw:{blind}:"})
	r, err := rw.TryRLock(ctx, 10*time.Second)
	require.NoError(t, err)
	_, err = rw.TryLock(ctx, 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "the writer while a reader holds")
	w, err := blind.TryLock(ctx, "writer", 10*time.Second)
	require.NoError(t, err, "a writer without the check is granted while a reader holds")
	assert.True(t, time.Now().Before(r.Until()) && time.Now().Before(w.Until()), "the reader and the blind writer are both inside their validity")
	_, err = rw.TryRLock(ctx, 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained, "the readers' own check still sees the writer key")
	require.NoError(t, w.Unlock(ctx))
	require.NoError(t, r.Unlock(ctx))
}

// TestSemaphoreClusterNodes: on Redis Cluster nodes, a semaphore and a
// read-write lock whose names carry a hash tag work (their keys share a
// slot), and a name without one is refused before anything is sent.
func TestSemaphoreClusterNodes(t *testing.T) {
	leakcheck.Check(t)
	cls := clusters(t, 3, 1, 1)
	nodes := make([]redis.UniversalClient, len(cls))
	for i, c := range cls {
		nodes[i] = c
	}
	cl, err := redlock.New(nodes, &redlock.Options{RestartGuard: 3 * time.Second, NodeTimeout: time.Second, Waiting: redlock.WaitInLine})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	ctx := t.Context()

	_, err = cl.Semaphore("reports", 2).TryAcquire(ctx, time.Second)
	require.ErrorContains(t, err, `semaphore name "reports" has no hash tag`)
	_, err = cl.RWMutex("prices").TryRLock(ctx, time.Second)
	require.ErrorContains(t, err, `read-write lock name "prices" has no hash tag`)

	sem := cl.Semaphore("{reports}", 2)
	var p *redlock.Permit
	require.Eventually(t, func() bool { // the slot's first use may find the nodes guarded: a new deployment
		p, err = sem.TryAcquire(ctx, 2*time.Second)
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "%v", err)
	q, err := sem.TryAcquire(ctx, 2*time.Second)
	require.NoError(t, err)
	_, err = sem.TryAcquire(ctx, 2*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.NoError(t, p.Extend(ctx, 2*time.Second))
	require.NoError(t, p.Release(ctx))
	require.NoError(t, q.Release(ctx))

	rw := cl.RWMutex("{prices}")
	r, err := rw.RLock(ctx, 2*time.Second)
	require.NoError(t, err)
	_, err = rw.TryLock(ctx, 2*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.NoError(t, r.Unlock(ctx))
	w, err := rw.Lock(ctx, 2*time.Second)
	require.NoError(t, err)
	require.NoError(t, w.Extend(ctx, 2*time.Second))
	require.NoError(t, w.Unlock(ctx))
}

// TestSemaphoreWakesRealServers: on five real masters, a caller waiting
// for a full semaphore, whose backoff is far longer than the test, is
// woken by a release and obtains the freed slot within a few rounds; an
// uncontended Acquire and Release make one round each.
func TestSemaphoreWakesRealServers(t *testing.T) {
	leakcheck.Check(t)
	addrs, direct := five(t)
	ctx := t.Context()
	var mu sync.Mutex
	rounds := map[redlock.Op][]int{}
	obs := &redlock.Observer{End: func(_ context.Context, e redlock.Event) {
		mu.Lock()
		defer mu.Unlock()
		rounds[e.Op] = append(rounds[e.Op], len(e.Rounds))
	}}
	holder := open(t, addrs, &redlock.Options{Observer: obs})
	waiter := open(t, addrs, &redlock.Options{MinRetryDelay: time.Minute, MaxRetryDelay: time.Minute, Observer: obs})
	warm, err := holder.Lock(ctx, "warm", time.Second) // the nodes' first lock: a new deployment takes two rounds
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(ctx))
	sem := holder.Semaphore("{jobs}", 2)
	for range 3 { // uncontended
		p, err := sem.Acquire(ctx, 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, p.Release(ctx))
	}
	var held []*redlock.Permit
	for range 2 {
		p, err := sem.Acquire(ctx, 10*time.Second)
		require.NoError(t, err)
		held = append(held, p)
	}
	done := make(chan error, 1)
	go func() {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second) // below the backoff
		defer cancel()
		p, err := waiter.Semaphore("{jobs}", 2).Acquire(wctx, 10*time.Second)
		if err == nil {
			err = p.Release(ctx)
		}
		done <- err
	}()
	// The waiter's first pass failed, and it waits: it subscribed to the
	// slots' releases (only a refused round does) on a quorum of the nodes.
	require.Eventually(t, func() bool {
		n := 0
		for _, d := range direct {
			if len(d.PubSubChannels(ctx, protocol.ReleasedChannel+"*").Val()) > 0 {
				n++
			}
		}
		return n >= 3
	}, 10*time.Second, 5*time.Millisecond, "the waiter waits")
	require.NoError(t, held[1].Release(ctx))
	require.NoError(t, <-done)
	require.NoError(t, held[0].Release(ctx))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []int{1, 1, 1}, rounds[redlock.OpAcquire][:3], "uncontended: one round each")
	woken := rounds[redlock.OpAcquire][5]
	assert.LessOrEqual(t, woken, 2+2+2, "rounds of the woken waiter: a pass of two slots, perhaps one more on the subscriptions' confirmation, then the freed slot")
	for _, n := range rounds[redlock.OpUnlock] {
		assert.Equal(t, 1, n, "one round per release")
	}
}

// TestSemaphoreBoundNegativeControl: the count of holders that
// TestSemaphoreRealServers checks does see a violation: two groups of
// Clients given node lists 0–2 and 2–4 of five real masters, whose
// majorities can be disjoint (assumption A2 broken), hold a semaphore of
// limit 1 more than once at a time.
func TestSemaphoreBoundNegativeControl(t *testing.T) {
	leakcheck.Check(t)
	addrs, _ := five(t)
	ctx := t.Context()
	// A first lock over all five ends their restart guard (a new
	// deployment), which two groups of three nodes would each see half
	// ended.
	l, err := open(t, addrs, nil).Lock(ctx, "warm", time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	groups := [][]string{addrs[:3], addrs[2:]}
	var h holdCounter
	var wg sync.WaitGroup
	for g := range 6 {
		c := open(t, groups[g%2], &redlock.Options{MaxRetryDelay: 20 * time.Millisecond})
		wg.Go(func() {
			sem := c.Semaphore("{reports}", 1)
			for range 6 {
				p, err := sem.Acquire(ctx, 10*time.Second)
				if !assert.NoError(t, err) {
					return
				}
				h.enter()
				time.Sleep(20 * time.Millisecond)
				h.leave()
				assert.NoError(t, p.Release(ctx))
			}
		})
	}
	wg.Wait()
	assert.Greater(t, h.most.Load(), int32(1), "the count saw no more than one holder although the quorums can be disjoint")
}
