package wake

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
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

// cluster is n miniredis nodes and a go-redis client on each.
type cluster struct {
	srv     []*miniredis.Miniredis
	clients []redis.UniversalClient
}

func newCluster(t *testing.T, n int) *cluster {
	t.Helper()
	c := &cluster{}
	for range n {
		m := miniredis.RunT(t)
		cl := redis.NewClient(nodeOptions(m.Addr()))
		t.Cleanup(func() { _ = cl.Close() })
		c.srv = append(c.srv, m)
		c.clients = append(c.clients, cl)
	}
	return c
}

// nodeOptions are a client's options for a node: RESP2 and no handshake
// extras, which miniredis does not all know.
func nodeOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr: addr, Protocol: 2, MaxRetries: -1, DisableIdentity: true, DialTimeout: time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

// ring returns a go-redis Ring with one shard, on m.
func ring(t *testing.T, m *miniredis.Miniredis) *redis.Ring {
	t.Helper()
	r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": m.Addr()}, Protocol: 2, MaxRetries: -1, DisableIdentity: true})
	t.Cleanup(func() { _ = r.Close() })
	return r
}

// newWaker returns a Waker on nodes, closed when the test ends.
func newWaker(t *testing.T, nodes []redis.UniversalClient, idle time.Duration) *Waker {
	t.Helper()
	w := New(nodes, idle, clock.Real{})
	t.Cleanup(w.Close)
	return w
}

// subscribers returns how many of the nodes have a subscriber on key's
// release channel.
func subscribers(srv []*miniredis.Miniredis, key string) int {
	ch, n := protocol.ReleasedChannel+key, 0
	for _, m := range srv {
		n += m.PubSubNumSub(ch)[ch]
	}
	return n
}

// channels returns how many channels the nodes have subscribers on, in all.
func channels(srv []*miniredis.Miniredis) int {
	n := 0
	for _, m := range srv {
		n += len(m.PubSubChannels(""))
	}
	return n
}

// waitSubscribed waits until each of srv has a subscriber on the release
// channel of every key: a release published earlier could be missed.
func waitSubscribed(t *testing.T, srv []*miniredis.Miniredis, keys ...string) {
	t.Helper()
	for _, k := range keys {
		require.Eventually(t, func() bool { return subscribers(srv, k) == len(srv) }, bound, time.Millisecond, "%q not subscribed on every node", k)
	}
}

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

// TestOnReleased: the channel from On(key) is closed when any one node
// announces key's release, whether the server publishes it (as the release
// script does) or a client does; it is shared by the waits for the same key,
// and another key's release does not close it.
func TestOnReleased(t *testing.T) {
	for _, tc := range []struct {
		name    string
		node    int
		publish func(t *testing.T, c *cluster, node int, key string) error
	}{
		{"server publishes on the first node", 0, func(t *testing.T, c *cluster, node int, key string) error {
			c.srv[node].Publish(protocol.ReleasedChannel+key, "1")
			return nil
		}},
		{"client publishes on the last node", 2, func(t *testing.T, c *cluster, node int, key string) error {
			return c.clients[node].Publish(t.Context(), protocol.ReleasedChannel+key, "1").Err()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			c := newCluster(t, 3)
			w := newWaker(t, c.clients, long)
			k := w.On("k")
			require.NotNil(t, k)
			k2 := w.On("k")
			assert.Equal(t, k, k2, "the waits for one key share a channel")
			other := w.On("other")
			require.NotNil(t, other)
			assert.Equal(t, 2, w.Waits())
			assert.Equal(t, 2, w.Subscribed())
			assert.Equal(t, 3, w.Connections())
			waitSubscribed(t, c.srv, "k", "other")
			assert.False(t, closed(k))

			require.NoError(t, tc.publish(t, c, tc.node, "k"))
			waitClosed(t, k, "no wake on k's release")
			assert.False(t, closed(other), "k's release woke the waits for other")
			assert.False(t, w.Waiting("k"), "a woken key is no longer waited for")
			assert.True(t, w.Waiting("other"))
			assert.Equal(t, 1, w.Waits())
			assert.Equal(t, 2, w.Subscribed(), "a woken key stays subscribed")

			// A new wait for k gets a new channel, which the old wait's
			// Done does not end.
			again := w.On("k")
			require.NotNil(t, again)
			assert.False(t, closed(again))
			w.Done("k", k)
			w.Done("k", k2)
			assert.True(t, w.Waiting("k"), "Done with a woken channel ended a later wait")
			require.NoError(t, tc.publish(t, c, tc.node, "k"))
			waitClosed(t, again, "no wake on k's second release")

			require.NoError(t, tc.publish(t, c, tc.node, "other"))
			waitClosed(t, other, "no wake on other's release")
			assert.Zero(t, w.Waits())
		})
	}
}

// TestOnSince: a release announced while nobody waited (the waiter's
// round was out) closes the channel of a wait that began after it, if it
// came after the time given; the plain On, the negative control, misses it.
func TestOnSince(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 2)
	w := newWaker(t, c.clients, long)
	k := w.On("k")
	require.NotNil(t, k)
	waitSubscribed(t, c.srv, "k")
	c.srv[0].Publish(protocol.ReleasedChannel+"k", "first")
	waitClosed(t, k, "no wake on k's release")
	assert.Equal(t, "first", w.Next(k))
	w.Done("k", k)

	sent := time.Now() // a round goes out; nobody waits
	c.srv[1].Publish(protocol.ReleasedChannel+"k", "second")
	require.Eventually(t, func() bool { n, _ := w.Named("k"); return n == "second" }, bound, time.Millisecond)

	plain := w.On("k")
	assert.False(t, closed(plain), "On closed at once: the control is void")
	w.Done("k", plain)
	late := w.OnSince("k", time.Now())
	assert.False(t, closed(late), "an announcement before since closed the wait")
	w.Done("k", late)
	missed := w.OnSince("k", sent)
	require.True(t, closed(missed), "the announcement that came while the round was out is lost")
	assert.Equal(t, "second", w.Next(missed), "whom it named")
	w.Done("k", missed)
	assert.Zero(t, w.Waits())

	// A wait that began by OnSince hears the next announcement as On does.
	again := w.OnSince("k", time.Now())
	c.srv[0].Publish(protocol.ReleasedChannel+"k", "third")
	waitClosed(t, again, "no wake on k's third release")
	assert.Equal(t, "third", w.Next(again))
	w.Done("k", again)
}

// TestOnSinceNewKey: a wait that did not listen before (OnSince) for a key
// not yet subscribed may have missed a release announced before its
// subscription was in place, so its channel is closed, naming nobody, once
// a majority of the nodes confirmed the subscription, with one of three
// nodes down too; On, which always listened, gets no such wake (the
// control), nor does a later OnSince for the key once it is subscribed.
func TestOnSinceNewKey(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	c.srv[2].Close()
	w := newWaker(t, c.clients, long)

	plain := w.On("plain")
	require.NotNil(t, plain)
	waitSubscribed(t, c.srv[:2], "plain")
	assert.Never(t, func() bool { return closed(plain) }, 100*time.Millisecond, time.Millisecond, "On woken without an announcement")

	k := w.OnSince("k", time.Now())
	require.NotNil(t, k)
	waitClosed(t, k, "a new subscription did not wake its wait")
	assert.Equal(t, 2, subscribers(c.srv[:2], "k"), "woken before the majority confirmed")
	assert.Empty(t, w.Next(k), "the wake names nobody")
	w.Done("k", k)
	_, heard := w.Named("k")
	assert.True(t, heard.IsZero(), "the wake was taken for an announcement")

	again := w.OnSince("k", time.Now())
	assert.Never(t, func() bool { return closed(again) }, 100*time.Millisecond, time.Millisecond, "a subscribed key's wait woken without an announcement")
	c.srv[0].Publish(protocol.ReleasedChannel+"k", "next")
	waitClosed(t, again, "no wake on k's release")
	assert.Equal(t, "next", w.Next(again))
	w.Done("k", again)
	w.Done("plain", plain)
}

// TestDoneAndIdle: Done ends a wait (the last Done of a key's waits drops
// the key's wait); a key nobody waits for is unsubscribed on the nodes once
// idle, while a key still waited for stays subscribed; once no key is left
// the connections close, and the next On connects and subscribes again.
func TestDoneAndIdle(t *testing.T) {
	leakcheck.Check(t)
	const idle = 50 * time.Millisecond
	c := newCluster(t, 3)
	w := newWaker(t, c.clients, idle)
	k := w.On("k")
	other := w.On("other")
	other2 := w.On("other")
	waitSubscribed(t, c.srv, "k", "other")

	w.Done("other", other)
	assert.True(t, w.Waiting("other"), "one of two waits for other is left")
	w.Done("other", other2)
	assert.False(t, w.Waiting("other"))
	assert.Equal(t, 1, w.Waits())
	require.Eventually(t, func() bool { return subscribers(c.srv, "other") == 0 }, bound, time.Millisecond, "an idle key still subscribed on the nodes")
	assert.Equal(t, 1, w.Subscribed())
	// k, subscribed before other, is as idle: it stays, for several idle
	// times, because a wait is under way.
	assert.Never(t, func() bool { return subscribers(c.srv, "k") < 3 || w.Subscribed() != 1 }, 4*idle, idle/10, "unsubscribed while waited for")
	assert.Equal(t, 3, channels(c.srv), "only the waited-for key")
	assert.Equal(t, 3, w.Connections())
	assert.Equal(t, 1, w.Subscribed())

	w.Done("k", k)
	assert.Zero(t, w.Waits())
	require.Eventually(t, func() bool { return w.Connections() == 0 }, bound, time.Millisecond, "connections open with no key subscribed")
	assert.Zero(t, w.Subscribed())
	require.Eventually(t, func() bool { return channels(c.srv) == 0 }, bound, time.Millisecond, "subscriptions left on the nodes")

	k = w.On("k")
	require.NotNil(t, k)
	assert.Equal(t, 3, w.Connections(), "the next wait connects again")
	waitSubscribed(t, c.srv, "k")
	c.srv[1].Publish(protocol.ReleasedChannel+"k", "1")
	waitClosed(t, k, "no wake after subscribing again")
	w.Done("k", k)
}

// TestClose: Close stops every goroutine of the Waker (leakcheck), also
// while a node is down and its listener retries, and does not wake the
// waits; On returns nil afterwards, and a second Close is harmless.
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
			up := c.srv
			if tc.down {
				c.srv[2].Close()
				up = c.srv[:2]
			}
			w := newWaker(t, c.clients, long)
			var chs []<-chan struct{}
			for _, k := range tc.keys {
				ch := w.On(k)
				require.NotNil(t, ch)
				chs = append(chs, ch)
			}
			waitSubscribed(t, up, tc.keys...)
			w.Close()
			for i, ch := range chs {
				assert.False(t, closed(ch), "Close woke the wait for %q", tc.keys[i])
			}
			assert.Nil(t, w.On("k"), "On after Close")
			w.Close()
			require.Eventually(t, func() bool { return channels(up) == 0 }, bound, time.Millisecond, "subscriptions left on the nodes")
		})
	}
}

// TestRingsLeftOut: a go-redis Ring among the nodes gets no subscription
// and no connection, and its node's announcements wake nothing; with only
// Rings, On returns nil and nothing is subscribed.
func TestRingsLeftOut(t *testing.T) {
	t.Run("among other nodes", func(t *testing.T) {
		leakcheck.Check(t)
		c := newCluster(t, 3)
		nodes := []redis.UniversalClient{ring(t, c.srv[0]), c.clients[1], c.clients[2]}
		w := newWaker(t, nodes, long)
		k := w.On("k")
		require.NotNil(t, k)
		assert.Equal(t, 2, w.Connections(), "a connection for each node but the Ring")
		waitSubscribed(t, c.srv[1:], "k")
		assert.Zero(t, subscribers(c.srv[:1], "k"), "the Ring's node is subscribed")
		assert.Zero(t, c.srv[0].Publish(protocol.ReleasedChannel+"k", "1"), "a subscriber on the Ring's node")
		assert.False(t, closed(k))
		c.srv[2].Publish(protocol.ReleasedChannel+"k", "1")
		waitClosed(t, k, "the other nodes still wake the wait")
		w.Done("k", k)
	})
	t.Run("only Rings", func(t *testing.T) {
		leakcheck.Check(t)
		c := newCluster(t, 2)
		w := newWaker(t, []redis.UniversalClient{ring(t, c.srv[0]), ring(t, c.srv[1])}, long)
		assert.Nil(t, w.On("k"))
		w.Done("k", nil) // what a caller does after a nil On
		assert.Zero(t, w.Subscribed())
		assert.Zero(t, w.Connections())
		assert.Zero(t, w.Waits())
		assert.Zero(t, channels(c.srv))
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
		require.Eventually(t, func() bool { return channels(c.srv) == 0 }, bound, time.Millisecond, "trial %d: subscriptions left from the last trial", trial)
		f := clock.NewFake(time.Unix(0, 0))
		w := New(c.clients, time.Second, f)
		keep := w.On("a") // keeps the connection open
		waitSubscribed(t, c.srv, "a")
		w.Done("k", w.On("k")) // its subscription may still be in flight
		require.Eventually(t, func() bool { return f.Waiters() > 0 }, bound, time.Millisecond)
		f.Advance(time.Second) // "k" is idle: dropped
		require.Eventually(t, func() bool { return w.Subscribed() == 1 }, bound, time.Millisecond)
		ch := w.On("k") // waited for again at once
		require.Eventually(t, func() bool { return subscribers(c.srv, "k") == 1 }, bound, time.Millisecond, "trial %d: the node has no subscriber for k", trial)
		time.Sleep(5 * time.Millisecond) // an unsubscription still in flight would land now
		require.Equal(t, 1, subscribers(c.srv, "k"), "trial %d: unsubscribed after the new wait", trial)
		c.srv[0].Publish(protocol.ReleasedChannel+"k", "")
		waitClosed(t, ch, "trial %d: the release did not wake the wait", trial)
		w.Done("a", keep)
		w.Close()
	}
}

// TestCloseHearsHandoffs: a handoff that a node announced on the client's
// channel just before Close reaches the stray function before Close
// returns, and no node has the channel subscribed after it: Close
// unsubscribes the channel and waits for each node's confirmation, which a
// Redis server sends after every message published before it. Closing the
// connections at once (the negative control, closeAtOnce) loses such
// announcements. (On real servers: miniredis writes messages and replies
// from different goroutines, in no set order.)
func TestCloseHearsHandoffs(t *testing.T) {
	redisproc.Require(t)
	srv, err := redisproc.Start(t.Context(), 3)
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	var clients, publishers []redis.UniversalClient
	for _, addr := range srv.Addrs {
		cl, pub := redis.NewClient(nodeOptions(addr)), redis.NewClient(nodeOptions(addr))
		t.Cleanup(func() { _, _ = cl.Close(), pub.Close() })
		clients, publishers = append(clients, cl), append(publishers, pub)
	}
	for _, atOnce := range []bool{false, true} {
		t.Run(map[bool]string{false: "retire", true: "closeAtOnce"}[atOnce], func(t *testing.T) {
			leakcheck.Check(t)
			lost, heard := 0, 0
			for try := range 20 {
				live := fmt.Sprintf("%stest-%v-%d", protocol.LiveChannel, atOnce, try)
				w := NewLive(clients, long, clock.Real{}, live)
				var mu sync.Mutex
				var strays []string
				w.SetStray(func(node int, token, key string) {
					mu.Lock()
					defer mu.Unlock()
					strays = append(strays, fmt.Sprintf("%d %s %s", node, token, key))
				})
				ch := w.On("k")
				require.NotNil(t, ch)
				require.Eventually(t, func() bool {
					for _, p := range publishers {
						if p.PubSubNumSub(t.Context(), live).Val()[live] != 1 {
							return false
						}
					}
					return true
				}, bound, time.Millisecond, "the client's channel subscribed on every node")
				// The handoffs race Close: those that a node delivered to the
				// client (PUBLISH counted a receiver) must reach it.
				var delivered []string
				var pubs sync.WaitGroup
				for i, p := range publishers {
					pubs.Go(func() {
						hand := protocol.HandPrefix + fmt.Sprintf("tok%d", i)
						if n, err := p.Publish(t.Context(), live, fmt.Sprintf("%d:%sk", len(hand), hand)).Result(); err == nil && n == 1 {
							mu.Lock()
							delivered = append(delivered, fmt.Sprintf("%d tok%d k", i, i))
							mu.Unlock()
						}
					})
				}
				if atOnce {
					closeAtOnce(w)
				} else {
					w.Close()
				}
				pubs.Wait()
				if !atOnce {
					for _, p := range publishers {
						assert.Zero(t, p.PubSubNumSub(t.Context(), live).Val()[live], "the client's channel is still subscribed")
					}
				}
				mu.Lock()
				lost += len(delivered) - len(strays)
				heard += len(delivered)
				if !atOnce {
					assert.ElementsMatch(t, delivered, strays, "the handoffs delivered before Close")
				}
				mu.Unlock()
			}
			assert.Positive(t, heard, "no handoff reached the client before Close: the test is void")
			if atOnce {
				assert.Positive(t, lost, "closing at once lost no announcement: the control is void")
			}
		})
	}
}

// closeAtOnce is Close without retire: it closes the connections at once.
func closeAtOnce(w *Waker) {
	w.mu.Lock()
	subs := w.subs
	close(w.quit)
	w.closed, w.subs = true, nil
	w.mu.Unlock()
	for _, s := range subs {
		_ = s.ps.Close()
	}
	w.wg.Wait()
}

// TestForgetSole: ForgetSole notes a key cleared only when it is
// subscribed and every node handed it over to the round; Joining reports
// that once, and never for a key gone idle. The round is forgotten either
// way.
func TestForgetSole(t *testing.T) {
	leakcheck.Check(t)
	const idle = 50 * time.Millisecond
	c := newCluster(t, 3)
	w := newWaker(t, c.clients, idle)
	joining := func(wantEntries, wantCleared bool, msg string) {
		t.Helper()
		entries, cleared := w.Joining("k")
		assert.Equal(t, wantEntries, entries, "entries: %s", msg)
		assert.Equal(t, wantCleared, cleared, "cleared: %s", msg)
	}
	// sole releases a round of key k that the nodes (a bit each) handed over to.
	sole := func(nodes uint64) bool {
		t.Helper()
		w.Expect("tok", "k")
		w.mu.Lock()
		w.hands["tok"] = hand{key: "k", nodes: nodes}
		w.mu.Unlock()
		ok := w.ForgetSole("tok")
		assert.Zero(t, w.HandedNodes("tok"), "the round is forgotten")
		return ok
	}

	assert.False(t, sole(0b111), "a key not subscribed")
	joining(false, false, "a key not waited for lately")

	k := w.On("k")
	assert.False(t, sole(0b011), "a node did not hand the key over")
	joining(true, false, "waited for lately")

	assert.True(t, sole(0b111))
	joining(false, true, "every node handed the key over")
	joining(true, false, "reported once: the round joins again")

	assert.True(t, sole(0b111))
	w.Done("k", k)
	require.Eventually(t, func() bool { return w.Subscribed() == 0 }, bound, time.Millisecond)
	k = w.On("k")
	joining(true, false, "forgotten with the idle key")
	w.Done("k", k)
}
