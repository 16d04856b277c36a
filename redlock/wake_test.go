package redlock

import (
	"context"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
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
	waitListeners(t, c, "k", 1)
	start := time.Now()
	require.NoError(t, la.Unlock(t.Context()))
	require.NoError(t, <-got)
	assert.Less(t, time.Since(start), 5*time.Second, "woken by the release, not by the one-minute retry")
	require.NoError(t, b.Close())
	assert.Zero(t, b.waker().Waits())
}

// TestWakeDuringRound: a release announced while the waiter's round was
// out (its requests refused on every node, their replies not yet back)
// sends the waiter into its next round at once, instead of the minute of
// its retry delay: nothing listened for the announcement, but the Waker
// heard it.
func TestWakeDuringRound(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	a := c.client(t, &Options{Fencing: true}) // a fenced waiter is only named: no handoff
	la, err := a.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	c.waitHolders(t, "k", la.Token(), 3)

	hold := &replyHold{gate: make(chan struct{}), done: make(chan struct{})}
	b := c.hookedClient(t, hold, &Options{Fencing: true, NodeTimeout: 5 * time.Second,
		MinRetryDelay: time.Minute, MaxRetryDelay: time.Minute})
	got := lockUnlock(t, b, "k")
	waitWaiting(t, b, "k")
	require.Eventually(t, func() bool {
		return c.srv[0].PubSubNumSub(protocol.ReleasedChannel + b.stored("k"))[protocol.ReleasedChannel+b.stored("k")] == 1
	},
		5*time.Second, time.Millisecond, "b subscribed")

	// A release that names nobody sends b into a round, whose replies the
	// hook holds back once every node has refused it.
	hold.arm(len(c.srv))
	c.srv[0].Publish(protocol.ReleasedChannel+b.stored("k"), "")
	select {
	case <-hold.done:
	case <-time.After(5 * time.Second):
		t.Fatal("b's round did not reach every node")
	}
	require.NoError(t, la.Unlock(t.Context()))
	require.Eventually(t, func() bool { return c.keys("k") == 0 }, 5*time.Second, time.Millisecond, "a released every node")
	require.Eventually(t, func() bool { next, _ := b.waker().Named(b.stored("k")); return next != "" },
		5*time.Second, time.Millisecond, "b heard a's release, which names it")
	require.Eventually(t, func() bool { return b.waker().Announcements(b.stored("k")) == 1+len(c.srv) },
		5*time.Second, time.Millisecond, "b heard the announcement that named nobody and every node's of a's release")
	start := time.Now()
	close(hold.gate)
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("b slept through a release that came while its round was out: its retry delay is a minute")
	}
	assert.Less(t, time.Since(start), 5*time.Second)
}

// TestWakeNewSubscription: a Client's first wait for a key subscribes to
// its release only after its first round failed, so a release that comes
// in between is announced to nobody. The waiter tries again once its
// subscription is in place, instead of sleeping out its retry delay of a
// minute.
func TestWakeNewSubscription(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	a := c.client(t, nil)
	la, err := a.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	c.waitHolders(t, "k", la.Token(), 3)

	hold := &replyHold{gate: make(chan struct{}), done: make(chan struct{})}
	b := c.hookedClient(t, hold, &Options{NodeTimeout: 5 * time.Second,
		MinRetryDelay: time.Minute, MaxRetryDelay: time.Minute})
	// b's first round: every node refuses it, and its replies are held
	// back until a has released the key.
	hold.arm(len(c.srv))
	got := lockUnlock(t, b, "k")
	select {
	case <-hold.done:
	case <-time.After(5 * time.Second):
		t.Fatal("b's round did not reach every node")
	}
	assert.Zero(t, b.waker().Subscribed(), "b subscribed before its round failed: the test is void")
	require.NoError(t, la.Unlock(t.Context()))
	require.Eventually(t, func() bool { return c.keys("k") == 0 }, 5*time.Second, time.Millisecond, "a released every node")
	close(hold.gate)
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("b slept through a release that came before it subscribed: its retry delay is a minute")
	}
}

// replyHold holds back the replies of the lock scripts, once armed for n
// of them, until gate is closed; done is closed once n were answered.
type replyHold struct {
	n, seen    atomic.Int64
	gate, done chan struct{}
}

func (h *replyHold) arm(n int) { h.n.Store(int64(n)) }

// after holds a lock script's reply while armed.
func (h *replyHold) after(cmd redis.Cmder) {
	n := h.n.Load()
	if n == 0 || !lockScript(cmd) || h.seen.Load() >= n {
		return
	}
	if h.seen.Add(1) == n {
		close(h.done)
	}
	<-h.gate
}

func (h *replyHold) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *replyHold) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.after(cmd)
		return err
	}
}

func (h *replyHold) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.after(cmd)
		}
		return err
	}
}

// TestWakeNotOnFailedRounds shows that the clean-up of a failed round
// announces nothing where no waiter is in line (the key it set is not
// marked): a waiter is not woken by its own failed rounds there, only by an
// unlock. TestHandoffCleanUpNames has the clean-up of a marked key.
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
	rounds := &cmdCounter{match: isScript(scripts.Acquire)} // a's lock loaded the acquire script on node 1
	c.nodes[1].AddHook(rounds)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	_, err = b.Lock(ctx, "k", time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	// The first round, the round once b's new subscription is in place (a
	// release may have come before it), then the timed wait.
	assert.Equal(t, int64(2), rounds.n.Load(), "two rounds, then the timed wait")
}

// TestWakeListenersStop checks that Close stops the pub/sub listeners, also
// when a node is down.
func TestWakeListenersStop(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	down := c.srv[2].Addr()
	c.srv[2].Close()
	dials := &dialCounter{addr: down}
	b := c.hookedClient(t, dials, &Options{})
	ch := b.waker().Listen("k", time.Time{})
	require.NotNil(t, ch)
	require.Eventually(t, func() bool { return dials.n.Load() >= 2 }, 5*time.Second, time.Millisecond,
		"the listener of node 2 failed to connect, and tried again")
	require.NoError(t, b.Close())
	assert.Nil(t, b.waker().Listen("k", time.Time{}), "no listener after Close")
}

// dialCounter counts the dials to addr.
type dialCounter struct {
	addr string
	n    atomic.Int32
}

func (h *dialCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == h.addr {
			h.n.Add(1)
		}
		return next(ctx, network, addr)
	}
}
func (h *dialCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *dialCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// lockUnlock locks key through cl in a goroutine, for a second, and
// unlocks it; the channel receives the error.
func lockUnlock(t *testing.T, cl *Client, key string) <-chan error {
	got := make(chan error, 1)
	go func() {
		l, err := cl.Lock(t.Context(), key, time.Second)
		if err == nil {
			err = l.Unlock(context.Background())
		}
		got <- err
	}()
	return got
}

// waitWaiting waits until a Lock of cl is registered for key's release,
// with its subscription in place: a first wait's round after its new
// subscription was confirmed (see wake.Waker.Listen) is done.
func waitWaiting(t *testing.T, cl *Client, key string) {
	t.Helper()
	require.Eventually(t, func() bool {
		k := cl.stored(key)
		return cl.waker().Waiting(k) && !cl.waker().Confirming(k)
	}, 5*time.Second, time.Millisecond)
}

// waitListeners waits until every node of c has at least n subscribers to
// the announcements of key (as given, with the default prefix), one more on
// each node of also (a test's own subscription).
func waitListeners(t *testing.T, c *cluster, key string, n int, also ...*server) {
	t.Helper()
	ch := protocol.ReleasedChannel + key
	require.Eventually(t, func() bool {
		for _, m := range c.srv {
			want := n
			if slices.Contains(also, m) {
				want++
			}
			if m.PubSubNumSub(ch)[ch] < want {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "%d listeners of %q on every node", n, key)
}

// lockScript reports whether cmd runs a script other than the connection check.
func lockScript(cmd redis.Cmder) bool {
	name, args := cmd.Name(), cmd.Args()
	if name != "evalsha" && name != "eval" || len(args) < 2 {
		return false
	}
	return args[1] != scripts.Check.Hash() && args[1] != checkSource
}

// TestWakeListenersStopWhenIdle: a waited-for key stays subscribed while a
// Lock waits, is unsubscribed once nobody has waited for it for wakeIdle
// (the connections close when no key is left), and is subscribed again by
// the next wait, which a release then wakes. Only the waited-for keys are
// subscribed: the release of another key reaches no listener.
func TestWakeListenersStopWhenIdle(t *testing.T) {
	leakcheck.Check(t)
	const wakeIdle = 50 * time.Millisecond
	c := newCluster(t, 3)
	c.tune = func(t *tunables) { t.wakeIdle = wakeIdle }
	cl := c.client(t, nil)
	running := func() bool { return cl.waker().Connections() == 3 }
	// subscribed returns how many nodes have a subscriber on key's channel,
	// and how many channels the nodes have in all.
	subscribed := func(key string) (int, int) {
		n, all := 0, 0
		for _, m := range c.srv {
			n += m.PubSubNumSub(releasedChannel + key)[releasedChannel+key]
			all += len(slices.DeleteFunc(m.PubSubChannels("*"), func(ch string) bool { return ch == cl.handChannel() }))
		}
		return n, all
	}
	ch := cl.waker().Listen("k", time.Time{})
	other := cl.waker().Listen("other", time.Time{})
	require.Eventually(t, func() bool { n, all := subscribed("k"); return n == 3 && all == 6 }, 5*time.Second, time.Millisecond)
	other.Close()
	// "other" is dropped once idle; "k", still waited for, stays.
	require.Eventually(t, func() bool { n, _ := subscribed("other"); return n == 0 }, 5*time.Second, time.Millisecond, "an idle key still subscribed")
	time.Sleep(4 * wakeIdle)
	n, all := subscribed("k")
	assert.Equal(t, 3, n, "unsubscribed while a Lock waits")
	assert.Equal(t, 3, all, "only the waited-for key")
	assert.True(t, running())
	ch.Close()
	require.Eventually(t, func() bool { return !running() }, 5*time.Second, time.Millisecond, "connections still open")
	require.Eventually(t, func() bool { _, all := subscribed("k"); return all == 0 }, 5*time.Second, time.Millisecond, "subscriptions left on the nodes")

	holder := c.client(t, nil)
	l, err := holder.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	ch = cl.waker().Listen("k", time.Time{})
	require.True(t, running())
	// The subscriptions are made in the background: unlock once they are.
	require.Eventually(t, func() bool { n, _ := subscribed("k"); return n == 3 }, 5*time.Second, time.Millisecond)
	// A release is announced where the key refused a waiter (see
	// internal/protocol/acquire.lua): cl's round, as a Lock's would.
	_, err = cl.TryLock(t.Context(), "k", time.Minute)
	require.ErrorIs(t, err, ErrTaken)
	require.NoError(t, l.Unlock(t.Context()))
	select {
	case <-ch.C():
	case <-time.After(5 * time.Second):
		t.Fatal("no wake after subscribing again")
	}
	ch.Close()
}

// TestWakeAllRings: a Client whose nodes are all Rings subscribes to nothing
// (a Ring routes a channel by its name, not to the key's shard; go-redis
// panics on a Ring subscription without a channel) and keeps no key for
// it: its waiting Lock ends by its own retry or context, without a panic.
func TestWakeAllRings(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	var rings []redis.UniversalClient
	for _, m := range c.srv {
		r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": m.Addr()}, Protocol: 2, MaxRetries: -1, ContextTimeoutEnabled: true, DisableIdentity: true})
		t.Cleanup(func() { _ = r.Close() })
		rings = append(rings, r)
	}
	holder, err := New(rings, nil)
	require.NoError(t, err)
	waiter, err := New(rings, &Options{MinRetryDelay: 10 * time.Millisecond, MaxRetryDelay: 10 * time.Millisecond})
	require.NoError(t, err)
	l, err := holder.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	for _, key := range []string{"k", "k"} {
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		_, err = waiter.Lock(ctx, key, time.Second)
		cancel()
		require.ErrorIs(t, err, ErrNotObtained)
	}
	assert.Zero(t, waiter.waker().Connections())
	assert.Zero(t, waiter.waker().Subscribed())
	require.NoError(t, l.Unlock(t.Context()))
	require.NoError(t, waiter.Close())
	require.NoError(t, holder.Close())
}
