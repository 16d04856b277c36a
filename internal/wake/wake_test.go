package wake

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// bound is how long a test waits for something that a working Waker does
// within milliseconds: only a broken one ever reaches it.
const bound = 5 * time.Second

// long is an idle time that no test outlasts: keys stay subscribed.
const long = time.Hour

// cluster is n redis-server processes and a go-redis client on each.
type cluster struct {
	srv     *redisproc.Servers
	clients []redis.UniversalClient
}

func newCluster(t *testing.T, n int) *cluster {
	t.Helper()
	c := &cluster{srv: redisproc.StartT(t, n)}
	for _, addr := range c.srv.Addrs {
		cl := redis.NewClient(nodeOptions(addr))
		t.Cleanup(func() { _ = cl.Close() })
		c.clients = append(c.clients, cl)
	}
	return c
}

// publish publishes msg on channel from node i, as another client would,
// and returns how many subscribers the node delivered it to.
func (c *cluster) publish(t *testing.T, i int, channel, msg string) int64 {
	t.Helper()
	n, err := c.clients[i].Publish(t.Context(), channel, msg).Result()
	require.NoError(t, err)
	return n
}

// nodeOptions are a client's options for a node: RESP2, and no handshake
// extras (Redis 7.0 rejects CLIENT SETINFO and has no maintenance
// notifications).
func nodeOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr: addr, Protocol: 2, MaxRetries: -1, DisableIdentity: true, DialTimeout: time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

// ring returns a go-redis Ring with one shard, on the node at addr.
func ring(t *testing.T, addr string) *redis.Ring {
	t.Helper()
	r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}, Protocol: 2, MaxRetries: -1, DisableIdentity: true})
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// newWaker returns a Waker on nodes, closed when the test ends.
func newWaker(t *testing.T, nodes []redis.UniversalClient, idle time.Duration) *Waker {
	t.Helper()
	w := New(nodes, idle, clock.Real{}, nil)
	t.Cleanup(w.Close)
	return w
}

// subscribers returns how many of the nodes have a subscriber on key's
// release channel (PUBSUB NUMSUB), or -1, which no test expects, when a
// node does not answer.
func subscribers(t *testing.T, nodes []redis.UniversalClient, key string) int {
	ch, n := protocol.ReleasedChannel+key, 0
	for _, node := range nodes {
		subs, err := node.PubSubNumSub(t.Context(), ch).Result()
		if err != nil {
			return -1
		}
		n += int(subs[ch])
	}
	return n
}

// channels returns how many channels the nodes have subscribers on, in all
// (PUBSUB CHANNELS), or -1 when a node does not answer. The pattern "*"
// makes go-redis send none; "" would match only the empty channel.
func channels(t *testing.T, nodes []redis.UniversalClient) int {
	n := 0
	for _, node := range nodes {
		chs, err := node.PubSubChannels(t.Context(), "*").Result()
		if err != nil {
			return -1
		}
		n += len(chs)
	}
	return n
}

// waitSubscribed waits until each of nodes has a subscriber on the release
// channel of every key: a release published earlier could be missed.
func waitSubscribed(t *testing.T, nodes []redis.UniversalClient, keys ...string) {
	t.Helper()
	for _, k := range keys {
		require.Eventually(t, func() bool { return subscribers(t, nodes, k) == len(nodes) }, bound, time.Millisecond, "%q not subscribed on every node", k)
	}
}

// listen begins a wait for key's release that always listened.
func listen(w *Waker, key string) *Wait { return w.Listen(key, time.Time{}) }

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, msgAndArgs ...any) {
	t.Helper()
	require.Eventually(t, func() bool { return closed(ch) }, bound, time.Millisecond, msgAndArgs...)
}

// TestListenReleased: a Wait's channel is closed when any one node
// announces key's release, whether the server publishes it (as the release
// script does) or a client does; it is shared by the waits for the same key,
// and another key's release does not close it.
func TestListenReleased(t *testing.T) {
	for _, tc := range []struct {
		name    string
		node    int
		publish func(t *testing.T, c *cluster, node int, key string) error
	}{
		{"server publishes on the first node", 0, func(t *testing.T, c *cluster, node int, key string) error {
			return c.clients[node].Eval(t.Context(), "return redis.call('PUBLISH', ARGV[1], ARGV[2])", nil, protocol.ReleasedChannel+key, "1").Err()
		}},
		{"client publishes on the last node", 2, func(t *testing.T, c *cluster, node int, key string) error {
			return c.clients[node].Publish(t.Context(), protocol.ReleasedChannel+key, "1").Err()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			c := newCluster(t, 3)
			w := newWaker(t, c.clients, long)
			k := listen(w, "k")
			require.NotNil(t, k)
			k2 := listen(w, "k")
			assert.NotSame(t, k, k2, "each Listen is a Wait of its own")
			assert.Equal(t, k.C(), k2.C(), "the waits for one key share a channel")
			other := listen(w, "other")
			require.NotNil(t, other)
			assert.Equal(t, 2, w.Waits())
			assert.Equal(t, 2, w.Subscribed())
			assert.Equal(t, 3, w.Connections())
			waitSubscribed(t, c.clients, "k", "other")
			assert.False(t, closed(k.C()))

			require.NoError(t, tc.publish(t, c, tc.node, "k"))
			waitClosed(t, k.C(), "no wake on k's release")
			assert.False(t, closed(other.C()), "k's release woke the waits for other")
			assert.False(t, w.Waiting("k"), "a woken key is no longer waited for")
			assert.True(t, w.Waiting("other"))
			assert.Equal(t, 1, w.Waits())
			assert.Equal(t, 2, w.Subscribed(), "a woken key stays subscribed")

			// A new wait for k gets a new channel, which closing the old
			// waits does not end.
			again := listen(w, "k")
			require.NotNil(t, again)
			assert.False(t, closed(again.C()))
			k.Close()
			k2.Close()
			assert.True(t, w.Waiting("k"), "closing a woken Wait ended a later wait")
			require.NoError(t, tc.publish(t, c, tc.node, "k"))
			waitClosed(t, again.C(), "no wake on k's second release")

			require.NoError(t, tc.publish(t, c, tc.node, "other"))
			waitClosed(t, other.C(), "no wake on other's release")
			assert.Zero(t, w.Waits())
		})
	}
}

// TestListenSince: a release announced while nobody waited (the waiter's
// round was out) closes the channel of a wait that began after it, if it
// came after the time given; a wait from the zero time, the negative
// control, misses it.
func TestListenSince(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 2)
	w := newWaker(t, c.clients, long)
	k := listen(w, "k")
	require.NotNil(t, k)
	waitSubscribed(t, c.clients, "k")
	c.publish(t, 0, protocol.ReleasedChannel+"k", "first")
	waitClosed(t, k.C(), "no wake on k's release")
	assert.Equal(t, "first", k.Next())
	k.Close()

	sent := time.Now() // a round goes out; nobody waits
	c.publish(t, 1, protocol.ReleasedChannel+"k", "second")
	require.Eventually(t, func() bool { n, _ := w.Named("k"); return n == "second" }, bound, time.Millisecond)

	plain := listen(w, "k")
	assert.False(t, closed(plain.C()), "a wait from the zero time closed at once: the control is void")
	plain.Close()
	late := w.Listen("k", time.Now())
	assert.False(t, closed(late.C()), "an announcement before since closed the wait")
	late.Close()
	missed := w.Listen("k", sent)
	require.True(t, closed(missed.C()), "the announcement that came while the round was out is lost")
	assert.Equal(t, "second", missed.Next(), "whom it named")
	missed.Close()
	assert.Zero(t, w.Waits())

	// A wait since a time hears the next announcement as one from the
	// zero time does.
	again := w.Listen("k", time.Now())
	c.publish(t, 0, protocol.ReleasedChannel+"k", "third")
	waitClosed(t, again.C(), "no wake on k's third release")
	assert.Equal(t, "third", again.Next())
	again.Close()
}

// TestListenNewKey: a wait that did not listen before (a since not zero)
// for a key not yet subscribed may have missed a release announced before
// its subscription was in place, so its channel is closed, naming nobody,
// once a majority of the nodes confirmed the subscription, with one of
// three nodes down too; a wait from the zero time, which always listened,
// gets no such wake (the control), nor does a later wait since a time for
// the key once it is subscribed.
func TestListenNewKey(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	c.srv.Kill(2)
	w := newWaker(t, c.clients, long)

	plain := listen(w, "plain")
	require.NotNil(t, plain)
	waitSubscribed(t, c.clients[:2], "plain")
	assert.Never(t, func() bool { return closed(plain.C()) }, 100*time.Millisecond, time.Millisecond, "a wait from the zero time woken without an announcement")

	k := w.Listen("k", time.Now())
	require.NotNil(t, k)
	waitClosed(t, k.C(), "a new subscription did not wake its wait")
	assert.Equal(t, 2, subscribers(t, c.clients[:2], "k"), "woken before the majority confirmed")
	assert.Empty(t, k.Next(), "the wake names nobody")
	k.Close()
	_, heard := w.Named("k")
	assert.True(t, heard.IsZero(), "the wake was taken for an announcement")

	again := w.Listen("k", time.Now())
	assert.Never(t, func() bool { return closed(again.C()) }, 100*time.Millisecond, time.Millisecond, "a subscribed key's wait woken without an announcement")
	c.publish(t, 0, protocol.ReleasedChannel+"k", "next")
	waitClosed(t, again.C(), "no wake on k's release")
	assert.Equal(t, "next", again.Next())
	again.Close()
	plain.Close()
}

// TestCloseWaitAndIdle: Close ends a wait (the last Close of a key's waits
// drops the key's wait); a key nobody waits for is unsubscribed on the
// nodes once idle, while a key still waited for stays subscribed; once no
// key is left the connections close, and the next Listen connects and
// subscribes again.
func TestCloseWaitAndIdle(t *testing.T) {
	leakcheck.Check(t)
	const idle = 50 * time.Millisecond
	c := newCluster(t, 3)
	w := newWaker(t, c.clients, idle)
	k := listen(w, "k")
	other := listen(w, "other")
	other2 := listen(w, "other")
	waitSubscribed(t, c.clients, "k", "other")

	other.Close()
	assert.True(t, w.Waiting("other"), "one of two waits for other is left")
	other2.Close()
	assert.False(t, w.Waiting("other"))
	assert.Equal(t, 1, w.Waits())
	require.Eventually(t, func() bool { return subscribers(t, c.clients, "other") == 0 }, bound, time.Millisecond, "an idle key still subscribed on the nodes")
	assert.Equal(t, 1, w.Subscribed())
	// k, subscribed before other, is as idle: it stays, for several idle
	// times, because a wait is under way.
	assert.Never(t, func() bool { return subscribers(t, c.clients, "k") < 3 || w.Subscribed() != 1 }, 4*idle, idle/10, "unsubscribed while waited for")
	assert.Equal(t, 3, channels(t, c.clients), "only the waited-for key")
	assert.Equal(t, 3, w.Connections())
	assert.Equal(t, 1, w.Subscribed())

	k.Close()
	assert.Zero(t, w.Waits())
	require.Eventually(t, func() bool { return w.Connections() == 0 }, bound, time.Millisecond, "connections open with no key subscribed")
	assert.Zero(t, w.Subscribed())
	require.Eventually(t, func() bool { return channels(t, c.clients) == 0 }, bound, time.Millisecond, "subscriptions left on the nodes")

	k = listen(w, "k")
	require.NotNil(t, k)
	assert.Equal(t, 3, w.Connections(), "the next wait connects again")
	waitSubscribed(t, c.clients, "k")
	c.publish(t, 1, protocol.ReleasedChannel+"k", "1")
	waitClosed(t, k.C(), "no wake after subscribing again")
	k.Close()
}

// TestClose: Close stops every goroutine of the Waker (leakcheck), also
// while a node is down and its listener retries, and does not wake the
// waits; Listen returns nil afterwards, and a second Close is harmless.
func TestClose(t *testing.T) {
	for _, tc := range []struct {
		name string
		down bool // the last node is down
		keys []string
	}{
		{"never used", false, nil},
		{"keys subscribed", false, []string{"k", "other"}},
		{"a node down", true, []string{"k"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			c := newCluster(t, 3)
			up := c.clients
			if tc.down {
				c.srv.Kill(2)
				up = c.clients[:2]
			}
			w := newWaker(t, c.clients, long)
			var waits []*Wait
			for _, k := range tc.keys {
				wt := listen(w, k)
				require.NotNil(t, wt)
				waits = append(waits, wt)
			}
			waitSubscribed(t, up, tc.keys...)
			w.Close()
			for i, wt := range waits {
				assert.False(t, closed(wt.C()), "Close woke the wait for %q", tc.keys[i])
			}
			assert.Nil(t, listen(w, "k"), "Listen after Close")
			w.Close()
			require.Eventually(t, func() bool { return channels(t, up) == 0 }, bound, time.Millisecond, "subscriptions left on the nodes")
		})
	}
}

// TestRingsLeftOut: a go-redis Ring among the nodes gets no subscription
// and no connection, and its node's announcements wake nothing; with only
// Rings, Listen returns nil and nothing is subscribed.
func TestRingsLeftOut(t *testing.T) {
	t.Run("among other nodes", func(t *testing.T) {
		leakcheck.Check(t)
		c := newCluster(t, 3)
		nodes := []redis.UniversalClient{ring(t, c.srv.Addrs[0]), c.clients[1], c.clients[2]}
		w := newWaker(t, nodes, long)
		k := listen(w, "k")
		require.NotNil(t, k)
		assert.Equal(t, 2, w.Connections(), "a connection for each node but the Ring")
		waitSubscribed(t, c.clients[1:], "k")
		assert.Zero(t, subscribers(t, c.clients[:1], "k"), "the Ring's node is subscribed")
		assert.Zero(t, c.publish(t, 0, protocol.ReleasedChannel+"k", "1"), "a subscriber on the Ring's node")
		assert.False(t, closed(k.C()))
		c.publish(t, 2, protocol.ReleasedChannel+"k", "1")
		waitClosed(t, k.C(), "the other nodes still wake the wait")
		k.Close()
	})
	t.Run("only Rings", func(t *testing.T) {
		leakcheck.Check(t)
		c := newCluster(t, 2)
		w := newWaker(t, []redis.UniversalClient{ring(t, c.srv.Addrs[0]), ring(t, c.srv.Addrs[1])}, long)
		wt := listen(w, "k")
		assert.Nil(t, wt)
		wt.Close() // what a caller does after a nil Listen
		assert.Zero(t, w.Subscribed())
		assert.Zero(t, w.Connections())
		assert.Zero(t, w.Waits())
		assert.Zero(t, channels(t, c.clients))
	})
}

// TestResubscribeRightAfterDrop: a key waited for again right after the idle
// loop dropped it ends up subscribed: the drop's unsubscription and the new
// wait's subscription run in the order they were made. (Before, they raced,
// and in about one trial in six the node was left without the subscription
// while the Waker believed the key subscribed, so its releases went unheard
// for as long as callers kept waiting.)
func TestResubscribeRightAfterDrop(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 1)
	for trial := range 200 {
		// The last trial's connection may still be subscribed on the node
		// for a moment after its Close: it must not count for this one.
		require.Eventually(t, func() bool { return channels(t, c.clients) == 0 }, bound, time.Millisecond, "trial %d: subscriptions left from the last trial", trial)
		f := clock.NewFake(time.Unix(0, 0))
		w := New(c.clients, time.Second, f, nil)
		keep := listen(w, "a") // keeps the connection open
		waitSubscribed(t, c.clients, "a")
		listen(w, "k").Close() // its subscription may still be in flight
		require.Eventually(t, func() bool { return f.Waiters() > 0 }, bound, time.Millisecond)
		f.Advance(time.Second) // "k" is idle: dropped
		require.Eventually(t, func() bool { return w.Subscribed() == 1 }, bound, time.Millisecond)
		wt := listen(w, "k") // waited for again at once
		require.Eventually(t, func() bool { return subscribers(t, c.clients, "k") == 1 }, bound, time.Millisecond, "trial %d: the node has no subscriber for k", trial)
		time.Sleep(5 * time.Millisecond) // an unsubscription still in flight would land now
		require.Equal(t, 1, subscribers(t, c.clients, "k"), "trial %d: unsubscribed after the new wait", trial)
		c.publish(t, 0, protocol.ReleasedChannel+"k", "")
		waitClosed(t, wt.C(), "trial %d: the release did not wake the wait", trial)
		keep.Close()
		w.Close()
	}
}
