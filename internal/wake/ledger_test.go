package wake

import (
	"fmt"
	"math/bits"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// handPayload is what a release announces on the client's hand channel when it
// hands key off to the round with token (see release.lua).
func handPayload(token, key string) string {
	hand := protocol.HandPrefix + token
	return fmt.Sprintf("%d:%s%s", len(hand), hand, key)
}

// handOff records that each node in nodes (a bit each) handed key off to
// the round with token.
func handOff(l *Ledger, nodes uint64, token, key string) {
	for i := range 64 {
		if nodes&(1<<i) != 0 {
			l.handed(i, handPayload(token, key))
		}
	}
}

// TestCloseHearsHandoffs: a handoff that a node announced on the client's
// channel just before Close reaches the stray function before Close
// returns, and no node has the channel subscribed after it: Close
// unsubscribes the channel and waits for each node's confirmation, which a
// Redis server sends after every message published before it. Closing the
// connections at once (the negative control, closeAtOnce) loses such
// announcements.
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
				ch := fmt.Sprintf("%stest-%v-%d", protocol.HandChannel, atOnce, try)
				var mu sync.Mutex
				var strays []string
				l := NewLedger(ch, func(node int, token, key string) {
					mu.Lock()
					defer mu.Unlock()
					strays = append(strays, fmt.Sprintf("%d %s %s", node, token, key))
				})
				w := New(clients, long, clock.Real{}, l)
				require.NotNil(t, listen(w, "k"))
				require.Eventually(t, func() bool {
					for _, p := range publishers {
						if p.PubSubNumSub(t.Context(), ch).Val()[ch] != 1 {
							return false
						}
					}
					return true
				}, bound, time.Millisecond, "the client's hand channel subscribed on every node")
				// The handoffs race Close: those that a node delivered to the
				// client (PUBLISH counted a receiver) must reach it.
				var delivered []string
				var pubs sync.WaitGroup
				for i, p := range publishers {
					pubs.Go(func() {
						if n, err := p.Publish(t.Context(), ch, handPayload(fmt.Sprintf("tok%d", i), "k")).Result(); err == nil && n == 1 {
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
						assert.Zero(t, p.PubSubNumSub(t.Context(), ch).Val()[ch], "the client's hand channel is still subscribed")
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

// TestHandoff: a handoff announced on the client's hand channel wakes the
// waits for the key, naming the hand value, and the ledger counts the
// node for the round's token; the channel is subscribed on every node
// while a key is (Subscribed), and no longer after Close. A handoff to a round
// not expected goes to the stray function, and wakes nothing.
func TestHandoff(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	const ch = protocol.HandChannel + "test"
	strays := make(chan string, 1)
	l := NewLedger(ch, func(node int, token, key string) { strays <- fmt.Sprintf("%d %s %s", node, token, key) })
	w := New(c.clients, long, clock.Real{}, l)
	assert.False(t, l.Subscribed(), "subscribed before any subscription")

	l.Expect("tok", "k")
	wt := listen(w, "k")
	require.NotNil(t, wt)
	waitSubscribed(t, c.clients, "k")
	require.Eventually(t, l.Subscribed, bound, time.Millisecond, "the client's hand channel is not subscribed")
	for _, n := range c.clients {
		require.Eventually(t, func() bool { return n.PubSubNumSub(t.Context(), ch).Val()[ch] == 1 }, bound, time.Millisecond)
	}

	c.publish(t, 1, ch, handPayload("stray", "k"))
	assert.Equal(t, "1 stray k", <-strays)
	assert.False(t, closed(wt.C()), "a stray handoff woke the wait")

	c.publish(t, 2, ch, handPayload("tok", "k"))
	waitClosed(t, wt.C(), "the handoff did not wake the wait")
	assert.Equal(t, protocol.HandPrefix+"tok", wt.Next())
	assert.Equal(t, 1, bits.OnesCount64(l.HandedNodes("tok")))
	assert.Equal(t, uint64(0b100), l.HandedNodes("tok"))
	wt.Close()

	w.Close()
	assert.False(t, l.Subscribed(), "subscribed after Close")
	require.Eventually(t, func() bool { return channels(t, c.clients) == 0 }, bound, time.Millisecond, "subscriptions left on the nodes")
}

// TestLedgerHanded: the ledger counts each node that announced a handoff
// to an expected round once, per token, until Forget; it ignores payloads
// it cannot read, and passes unexpected handoffs on only to a stray
// function.
func TestLedgerHanded(t *testing.T) {
	var got string
	l := NewLedger(protocol.HandChannel+"test", func(node int, token, key string) { got = fmt.Sprintf("%d %s %s", node, token, key) })
	l.Expect("a", "k")
	l.Expect("b", "other")
	handOff(l, 0b101, "a", "k")
	handOff(l, 0b001, "a", "k") // again: no more nodes
	handOff(l, 0b010, "b", "other")
	assert.Equal(t, 2, bits.OnesCount64(l.HandedNodes("a")))
	assert.Equal(t, uint64(0b101), l.HandedNodes("a"))
	assert.Equal(t, uint64(0b010), l.HandedNodes("b"))
	assert.Zero(t, l.HandedNodes("c"), "a round not expected")

	h, ok := l.handed(3, handPayload("b", "other"))
	require.True(t, ok)
	assert.Equal(t, handoff{key: "other", value: protocol.HandPrefix + "b"}, h)

	for _, bad := range []struct{ name, payload string }{
		{"no length", protocol.HandPrefix + "a" + "k"},
		{"length not a number", "x:" + protocol.HandPrefix + "ak"},
		{"negative length", "-1:" + protocol.HandPrefix + "ak"},
		{"length past the end", "99:" + protocol.HandPrefix + "ak"},
		{"not a hand value", "1:ak"},
	} {
		_, ok := l.handed(0, bad.payload)
		assert.False(t, ok, bad.name)
	}
	_, ok = l.handed(64, handPayload("a", "k"))
	assert.False(t, ok, "a node past the 64th")
	assert.Equal(t, uint64(0b101), l.HandedNodes("a"), "a bad payload counted")

	_, ok = NewLedger(protocol.HandChannel+"test", nil).handed(0, handPayload("c", "k"))
	assert.False(t, ok, "an unexpected handoff without a stray function")
	h, ok = l.handed(2, handPayload("c", "k"))
	require.True(t, ok)
	require.NotNil(t, h.stray, "an unexpected handoff")
	h.stray()
	assert.Equal(t, "2 c k", got)
	assert.Zero(t, l.HandedNodes("c"), "a stray handoff counted")

	assert.False(t, l.Forget("a", false))
	assert.Zero(t, l.HandedNodes("a"), "forgotten")
	h, ok = l.handed(1, handPayload("a", "k"))
	require.True(t, ok)
	assert.NotNil(t, h.stray, "a forgotten round's handoff is stray")
	assert.Equal(t, uint64(0b1010), l.HandedNodes("b"), "Forget dropped another round")
}

// TestLedgerDrop: Drop forgets a round and returns the nodes that
// announced a handoff to it, with the key; a handoff announced after it is
// stray.
func TestLedgerDrop(t *testing.T) {
	l := NewLedger(protocol.HandChannel+"test", func(int, string, string) {})
	l.Expect("a", "k")
	l.Expect("b", "k")
	handOff(l, 0b110, "a", "k")
	nodes, key := l.Drop("a")
	assert.Equal(t, uint64(0b110), nodes)
	assert.Equal(t, "k", key)
	assert.Zero(t, l.HandedNodes("a"), "dropped")
	h, ok := l.handed(0, handPayload("a", "k"))
	require.True(t, ok)
	assert.NotNil(t, h.stray, "a dropped round's handoff is stray")
	nodes, _ = l.Drop("b")
	assert.Zero(t, nodes, "no handoff to b")
	nodes, _ = l.Drop("c")
	assert.Zero(t, nodes, "a round not expected")
	var none *Ledger
	nodes, key = none.Drop("a")
	assert.Zero(t, nodes)
	assert.Empty(t, key)
}

// TestLedgerNil: a client without a channel has a nil Ledger, which
// records nothing, and a Waker given none subscribes no channel of its own.
func TestLedgerNil(t *testing.T) {
	l := NewLedger("", func(int, string, string) {})
	require.Nil(t, l)
	l.Expect("a", "k")
	assert.False(t, l.Subscribed())
	assert.Zero(t, l.HandedNodes("a"))
	assert.False(t, l.Forget("a", true))
	assert.False(t, l.Forget("a", false))
	entries, cleared := l.Joining("k")
	assert.False(t, entries)
	assert.False(t, cleared)

	c := newCluster(t, 2)
	w := newWaker(t, c.clients, long)
	wt := listen(w, "k")
	waitSubscribed(t, c.clients, "k")
	assert.Equal(t, 2, channels(t, c.clients), "only the key's channel")
	wt.Close()
}

// TestLedgerOneWaker: a Ledger given to a second Waker panics.
func TestLedgerOneWaker(t *testing.T) {
	l := NewLedger(protocol.HandChannel+"test", nil)
	New(nil, long, clock.Real{}, l).Close()
	assert.PanicsWithValue(t, "wake: a Ledger given to a second Waker", func() { New(nil, long, clock.Real{}, l) })
}

// TestForgetSole: Forget of a sole round notes a key cleared only when it
// is subscribed and every node handed it off to the round; Joining reports
// that once, and never for a key gone idle. The round is forgotten either
// way.
func TestForgetSole(t *testing.T) {
	leakcheck.Check(t)
	const idle = 50 * time.Millisecond
	c := newCluster(t, 3)
	l := NewLedger(protocol.HandChannel+"test", nil)
	w := New(c.clients, idle, clock.Real{}, l)
	t.Cleanup(w.Close)
	joining := func(wantEntries, wantCleared bool, msg string) {
		t.Helper()
		entries, cleared := l.Joining("k")
		assert.Equal(t, wantEntries, entries, "entries: %s", msg)
		assert.Equal(t, wantCleared, cleared, "cleared: %s", msg)
	}
	// sole releases a round of key k that the nodes (a bit each) handed off to.
	sole := func(nodes uint64) bool {
		t.Helper()
		l.Expect("tok", "k")
		handOff(l, nodes, "tok", "k")
		require.Equal(t, nodes, l.HandedNodes("tok"))
		ok := l.Forget("tok", true)
		assert.Zero(t, l.HandedNodes("tok"), "the round is forgotten")
		return ok
	}

	assert.False(t, sole(0b111), "a key not subscribed")
	joining(false, false, "a key not waited for lately")

	k := listen(w, "k")
	assert.False(t, sole(0b011), "a node did not hand the key off")
	joining(true, false, "waited for lately")

	assert.True(t, sole(0b111))
	joining(false, true, "every node handed the key off")
	joining(true, false, "reported once: the round joins again")

	assert.True(t, sole(0b111))
	k.Close()
	require.Eventually(t, func() bool { return w.Subscribed() == 0 }, bound, time.Millisecond)
	joining(false, false, "a key gone idle")
	k = listen(w, "k")
	joining(true, false, "forgotten with the idle key")
	k.Close()
}
