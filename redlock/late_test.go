package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/faultproxy"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// TestHandOverLateAcquire: a lock obtained while its acquire to a slow node
// is still on the way, and handed over at once by Unlock, leaves nothing
// behind on that node when the acquire lands after the waiter's round took
// the free key there and released it again. The waiter's round was sent
// to the slow node on a connection of its own (the node's batch had been
// in flight for longer than the batch window), so it overtook the acquire
// it was to take over.
func TestHandOverLateAcquire(t *testing.T) {
	s, p, cl := slowFifthNode(t)
	ctx := t.Context()

	const delay = 300 * time.Millisecond
	p.SetLatency(delay, 0)
	a, err := cl.Lock(ctx, "k", 10*time.Second) // decided without the slow node
	require.NoError(t, err)
	got := make(chan *Lock, 1)
	go func() {
		b, err := cl.Lock(ctx, "k", 10*time.Second)
		assert.NoError(t, err)
		got <- b
	}()
	waitQueued(t, cl, "k", 1)
	time.Sleep(20 * time.Millisecond) // past the batch window: b's commands to the slow node go on their own
	p.SetLatency(0, 0)                // and overtake a's acquire
	require.NoError(t, a.Unlock(ctx))
	b := <-got
	require.NotNil(t, b)
	require.NoError(t, b.Unlock(ctx))
	settle(cl) // a's acquire has landed and been answered; what it left is released

	admin := redis.NewClient(&redis.Options{Addr: s.Addrs[4], Protocol: 2})
	t.Cleanup(func() { _ = admin.Close() })
	v, err := admin.Get(ctx, "k").Result()
	if !errors.Is(err, redis.Nil) {
		require.NoError(t, err)
		tok, _ := protocol.Holding(v)
		assert.NotEqual(t, a.Token(), tok, "a's late acquire left its key on the slow node, pttl %v", admin.PTTL(ctx, "k").Val())
		assert.NotEqual(t, b.Token(), tok)
	}
}

// slowFifthNode starts five real servers and an established Client of
// them (node timeout 2 s) that reaches the fifth through p, a proxy that
// the test may slow down.
func slowFifthNode(t *testing.T) (*redisproc.Servers, *faultproxy.Proxy, *Client) {
	t.Helper()
	leakcheck.Check(t)
	s := redisproc.StartT(t, 5)
	p, err := faultproxy.NewProxy(s.Addrs[4])
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	addrs := append(append([]string(nil), s.Addrs[:4]...), p.Addr())
	cl, err := Open(addrs, &Options{NodeTimeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	warm, err := cl.Lock(t.Context(), "warm", 10*time.Second) // establishes the new deployment
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(t.Context()))
	return s, p, cl
}

// lateRig is three real servers, the last two of which a Client may reach
// through proxies that delay its acquires beyond its rounds.
type lateRig struct {
	s       *redisproc.Servers
	proxies []*faultproxy.Proxy // to servers 1 and 2
	admin   []*redis.Client     // to each server, direct
}

// newLateRig starts the servers and proxies.
func newLateRig(t *testing.T) *lateRig {
	r := &lateRig{s: redisproc.StartT(t, 3)}
	for i, addr := range r.s.Addrs {
		r.admin = append(r.admin, redis.NewClient(&redis.Options{Addr: addr, Protocol: 2}))
		t.Cleanup(func() { _ = r.admin[i].Close() })
		if i > 0 {
			p, err := faultproxy.NewProxy(addr)
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			r.proxies = append(r.proxies, p)
		}
	}
	return r
}

// client returns a Client of the servers, through the proxies when slow,
// whose deployment is established.
func (r *lateRig) client(t *testing.T, slow bool) *Client {
	addrs := append([]string(nil), r.s.Addrs...)
	if slow {
		addrs = []string{r.s.Addrs[0], r.proxies[0].Addr(), r.proxies[1].Addr()}
	}
	// The acquires the proxies hold are the script, one command: a
	// pipelined acquire's connection may be new, and its handshake, held
	// too, would keep the acquire from being sent at all.
	cl, err := openTuned(addrs, &Options{NodeTimeout: 300 * time.Millisecond}, func(tn *tunables) { tn.scriptAcquires = slow })
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	warm, err := cl.Lock(t.Context(), "warm", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(t.Context()))
	settle(cl)
	return cl
}

// failLate makes each of cls try k once while the proxies hold their
// acquires for delay: each round fails, and its release reaches servers 1
// and 2 first. It returns once every release has run.
func (r *lateRig) failLate(t *testing.T, delay time.Duration, cls ...*Client) {
	for _, p := range r.proxies {
		p.SetLatency(delay, 0)
	}
	done := make(chan error, len(cls))
	for _, cl := range cls {
		go func() {
			_, err := cl.TryLock(t.Context(), "k", time.Minute)
			done <- err
		}()
	}
	require.Eventually(t, func() bool {
		for _, p := range r.proxies {
			if p.Holding() < len(cls) {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "the proxies hold every client's acquire")
	for _, p := range r.proxies {
		p.SetLatency(0, 0) // the releases, on new connections, overtake them
	}
	for range cls {
		require.ErrorIs(t, <-done, ErrNotObtained)
	}
	for _, cl := range cls {
		settle(cl)
	}
}

// scriptCalls returns how many scripts server i has run.
func (r *lateRig) scriptCalls(t *testing.T, i int) int64 {
	info, err := r.admin[i].Info(t.Context(), "commandstats").Result()
	require.NoError(t, err)
	var n int64
	for _, line := range strings.Split(info, "\n") {
		for _, cmd := range []string{"cmdstat_eval:", "cmdstat_evalsha:"} {
			if rest, ok := strings.CutPrefix(line, cmd); ok {
				var c int64
				_, err := fmt.Sscanf(rest, "calls=%d", &c)
				require.NoError(t, err)
				n += c
			}
		}
	}
	return n
}

// landed waits until servers 1 and 2 have each run late more scripts, the
// late acquires, since before.
func (r *lateRig) landed(t *testing.T, before []int64, late int64) {
	for i := 1; i < 3; i++ {
		require.Eventually(t, func() bool { return r.scriptCalls(t, i) >= before[i]+late }, 10*time.Second, 5*time.Millisecond,
			"server %d: the late acquires did not land", i)
	}
}

// calls returns scriptCalls of every server.
func (r *lateRig) calls(t *testing.T) []int64 {
	return []int64{r.scriptCalls(t, 0), r.scriptCalls(t, 1), r.scriptCalls(t, 2)}
}

// leftFree asserts that no server holds k (a server may keep
// tombstones), and that a new Client locks k at once.
func (r *lateRig) leftFree(t *testing.T) {
	for i, admin := range r.admin {
		v, err := admin.Get(t.Context(), "k").Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		require.NoError(t, err)
		h, _ := protocol.Holding(v)
		assert.True(t, strings.HasPrefix(h, protocol.TombstonePrefix), "server %d: a late acquire left k holding %q (pttl %v)", i, v, admin.PTTL(t.Context(), "k").Val())
	}
	c := r.client(t, false)
	l, err := c.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err, "a third Client cannot lock k")
	require.NoError(t, l.Unlock(t.Context()))
}

// tombstoneOf waits until servers 1 and 2 hold tombstones only for k.
func (r *lateRig) tombstoneOf(t *testing.T) {
	for i := 1; i < 3; i++ {
		require.Eventually(t, func() bool {
			return strings.HasPrefix(r.admin[i].Get(t.Context(), "k").Val(), protocol.TombstonePrefix)
		}, 5*time.Second, time.Millisecond, "server %d: no tombstone", i)
	}
}

// TestLateAcquireAfterTakeover: a round's acquires to two of three servers
// come after its release left its tombstones there, and after another
// Client took the key over the tombstones and released it. The late
// acquires set nothing, and a third Client locks the key at once.
func TestLateAcquireAfterTakeover(t *testing.T) {
	leakcheck.Check(t)
	r := newLateRig(t)
	a, b := r.client(t, true), r.client(t, false)
	r.failLate(t, 3*time.Second, a)
	r.tombstoneOf(t)
	lb, err := b.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err, "b takes the key over a's tombstones")
	require.NoError(t, lb.Unlock(t.Context()))
	settle(b)
	before := r.calls(t)
	r.landed(t, before, 1)
	r.leftFree(t)
}

// TestLateAcquiresTwoTombstones: two Clients' rounds fail on the same key
// while their acquires to two of three servers are held; each release
// finds the key missing or holding the other's tombstone. Neither late
// acquire sets the key, and a third Client locks it at once.
func TestLateAcquiresTwoTombstones(t *testing.T) {
	leakcheck.Check(t)
	r := newLateRig(t)
	a, d := r.client(t, true), r.client(t, true)
	r.failLate(t, 3*time.Second, a, d)
	r.tombstoneOf(t)
	before := r.calls(t)
	r.landed(t, before, 2)
	r.leftFree(t)
}

// TestLockCancelledOnReturn: a caller that cancels its context as soon as
// Lock has returned (the usual defer cancel()) leaves the lock on every
// node, the slow one included. Its acquire there, still queued behind the
// previous lock's when the round was decided, is sent all the same: the
// round's calls do not end with the caller's context.
func TestLockCancelledOnReturn(t *testing.T) {
	s, p, cl := slowFifthNode(t)
	ctx := t.Context()
	settle(cl)

	p.SetLatency(3*time.Millisecond, 0) // within the batch window: the slow node's acquires queue
	var locks []*Lock
	for i := range 20 {
		lctx, cancel := context.WithCancel(ctx)
		l, err := cl.Lock(lctx, fmt.Sprintf("k%d", i), 10*time.Second)
		cancel()
		require.NoError(t, err)
		locks = append(locks, l)
	}
	settle(cl)
	for i, a := range s.Addrs {
		admin := redis.NewClient(&redis.Options{Addr: a, Protocol: 2})
		missing := 0
		for _, l := range locks {
			v, err := admin.Get(ctx, cl.cfg.prefix+l.Key()).Result()
			if tok, _ := protocol.Holding(v); err != nil || tok != l.Token() {
				missing++
			}
		}
		_ = admin.Close()
		assert.Zero(t, missing, "node %d does not hold %d of the %d locks", i, missing, len(locks))
	}
	for _, l := range locks {
		require.NoError(t, l.Unlock(ctx))
	}
}

// TestDetachIn: a round's calls see the caller's values but neither its
// cancellation nor its deadline, and a context without either is passed
// through as it is.
func TestDetachIn(t *testing.T) {
	type key struct{}
	parent, cancel := context.WithTimeout(context.WithValue(context.Background(), key{}, "v"), time.Hour)
	var d detachedCtx
	ctx := detachIn(&d, parent)
	cancel()
	assert.Equal(t, "v", ctx.Value(key{}))
	assert.NoError(t, ctx.Err())
	assert.Nil(t, ctx.Done())
	_, ok := ctx.Deadline()
	assert.False(t, ok)
	child, stop := context.WithTimeout(ctx, time.Hour)
	defer stop()
	assert.NoError(t, child.Err(), "a context derived from it does not end with the caller's")

	plain := context.Background()
	assert.Equal(t, plain, detachIn(&d, plain))
}

// TestExtendShorterCancelled: an Extend to a shorter TTL whose ctx ends
// before the nodes answer leaves Until no later than the new TTL allows:
// its calls outlive ctx and shorten the keys on the nodes all the same,
// after which another Client obtains the key.
func TestExtendShorterCancelled(t *testing.T) {
	leakcheck.Check(t)
	s := redisproc.StartT(t, 5)
	ctx := t.Context()
	open := func() *Client {
		cl, err := Open(s.Addrs, &Options{NodeTimeout: 600 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(func() { _ = cl.Close() })
		return cl
	}
	a, b := open(), open()
	l, err := a.Lock(ctx, "k", 30*time.Second)
	require.NoError(t, err)
	_, err = b.Holder(ctx, "k") // b's connections are open and checked before the pause
	require.NoError(t, err)

	for _, addr := range s.Addrs {
		_, err := redisproc.Do(ctx, addr, "CLIENT", "PAUSE", "300", "WRITE")
		require.NoError(t, err)
	}
	start := time.Now()
	ectx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	err = l.Extend(ectx, time.Second)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.False(t, l.Until().After(start.Add(time.Second)), "Until is %v after the extend began, beyond its 1s TTL", l.Until().Sub(start))

	var lb *Lock
	require.Eventually(t, func() bool {
		lb, err = b.TryLock(ctx, "k", 30*time.Second)
		return err == nil
	}, 5*time.Second, 10*time.Millisecond, "the keys keep their 30s TTL")
	now := time.Now()
	assert.False(t, now.Before(l.Until()), "b holds k while a's Until is %v away", l.Until().Sub(now))
	require.NoError(t, lb.Unlock(ctx))
}

// TestCloseLocksInFlight: Close while Lock calls are in flight leaves none
// of their keys held: a round that obtains its lock after Close began
// releases it, and its caller gets ErrClosed. The proxies delay the
// answers, not the requests, so that every round has set its key on every
// server before Close begins and is decided after.
func TestCloseLocksInFlight(t *testing.T) {
	leakcheck.Check(t)
	s := redisproc.StartT(t, 5)
	ctx := t.Context()
	addrs := make([]string, len(s.Addrs))
	var proxies []*faultproxy.Proxy
	for i, addr := range s.Addrs {
		p, err := faultproxy.NewProxy(addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		proxies, addrs[i] = append(proxies, p), p.Addr()
	}
	a, err := Open(addrs, &Options{Owner: "closed", NodeTimeout: 5 * time.Second})
	require.NoError(t, err)
	b, err := Open(s.Addrs, &Options{Owner: "reader"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	warm, err := a.Lock(ctx, "warm", 10*time.Second) // establishes the deployment
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(ctx))

	for _, p := range proxies {
		p.SetLatency(0, 200*time.Millisecond)
	}
	const n = 64
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := a.Lock(ctx, fmt.Sprintf("k%d", i), 30*time.Second)
			errs <- err
		}()
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	var admins []*redis.Client
	for _, addr := range s.Addrs {
		admin := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
		t.Cleanup(func() { _ = admin.Close() })
		admins = append(admins, admin)
	}
	require.Eventually(t, func() bool { // every round has its quorum's grants; their answers are on the way
		on := make([]int, n)
		for _, admin := range admins {
			vals, err := admin.MGet(ctx, keys...).Result()
			require.NoError(t, err)
			for i, v := range vals {
				if v != nil {
					on[i]++
				}
			}
		}
		return slices.Min(on) >= a.cfg.quorum
	}, 5*time.Second, time.Millisecond, "the acquires did not land")
	require.NoError(t, a.Close())
	obtained := 0
	for range n {
		if err := <-errs; err == nil {
			obtained++
		} else {
			assert.ErrorIs(t, err, ErrClosed)
		}
	}
	held := 0
	for i := range n {
		h, err := b.Holder(ctx, fmt.Sprintf("k%d", i))
		require.NoError(t, err)
		if h.Owner == "closed" {
			held++
		}
	}
	assert.Zero(t, held, "the closed Client holds %d of the %d keys (%d Lock calls returned a lock)", held, n, obtained)
	assert.Less(t, obtained, n, "every round was decided before Close began: the test shows nothing")
}
