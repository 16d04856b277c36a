package redlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
)

// lineKey is the key's line of waiters on the nodes, for an empty prefix.
func lineKey(key string) string { return protocol.LinePrefix + key }

// waitInLine waits until a quorum of the nodes have the same waiter in
// key's line, and returns its entry. (A round is not sent to a node whose
// earlier requests are still in flight once its outcome is decided, so a
// waiter may miss a node's line under load.)
func waitInLine(t *testing.T, c *cluster, key string) string {
	t.Helper()
	var place string
	require.Eventually(t, func() bool {
		seen := map[string]int{}
		for _, m := range c.srv {
			if members, err := m.ZMembers(lineKey(key)); err == nil && len(members) >= 1 {
				for _, e := range members {
					if seen[e]++; seen[e] > len(c.srv)/2 {
						place = e
						return true
					}
				}
			}
		}
		return false
	}, 10*time.Second, time.Millisecond, "a waiter in the line of %s: %v", key, dumpLines(c, key))
	return place
}

// withEntry returns a node whose line of key holds entry first. (A node
// may also hold the entry of a waiter that won by a round there late.)
func withEntry(t *testing.T, c *cluster, key, entry string) *server {
	t.Helper()
	for _, m := range c.srv {
		if members, _ := m.ZMembers(lineKey(key)); len(members) == 1 && members[0] == entry {
			return m
		}
	}
	t.Fatalf("no node has %s alone in the line of %s: %v", entry, key, dumpLines(c, key))
	return nil
}

// dumpLines returns a func that describes key's line on every node, for a
// failure message.
func dumpLines(c *cluster, key string) fmt.Stringer {
	return stringer(func() string {
		var b strings.Builder
		for i, m := range c.srv {
			members, _ := m.ZMembers(lineKey(key))
			fmt.Fprintf(&b, "node %d: %v; ", i, members)
		}
		return b.String()
	})
}

type stringer func() string

func (s stringer) String() string { return s() }

// lockAsync runs cl.Lock(key) in the background; the channel gets its
// error once the lock is held and released again.
func lockAsync(cl *Client, key string, timeout time.Duration) <-chan error {
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		l, err := cl.Lock(ctx, key, time.Second)
		if err == nil {
			err = l.Unlock(context.Background())
		}
		got <- err
	}()
	return got
}

// TestNextInLine: a waiter of another client joins the key's line on
// every node after its first round; the holder's unlock names it as next
// in line (and takes it off the line), and it obtains the lock at once.
// (Without handoffs on the node, as for fenced locks; TestHandoff covers
// them.)
func TestNextInLine(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	c.waiting = WaitInLine
	a := c.client(t, nil)
	b := c.client(t, &Options{MinRetryDelay: time.Minute, MaxRetryDelay: time.Minute})
	la, err := a.Lock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	c.waitHolders(t, "k", la.Token(), 3) // Lock returned at a quorum
	got := lockAsync(b, "k", 10*time.Second)
	place := waitInLine(t, c, "k")
	first := withEntry(t, c, "k", place)
	score, err := first.ZScore(lineKey("k"), place)
	require.NoError(t, err)
	assert.Positive(t, score, "the ticket orders the waiters")
	ttl := first.TTL(lineKey("k"))
	assert.Greater(t, ttl, 50*time.Second, "the line outlives the holder's key")

	sub := withEntry(t, c, "k", place) // a node whose line has b
	node := c.nodes[slices.Index(c.srv, sub)]
	ps := node.Subscribe(t.Context(), protocol.ReleasedChannel+"k")
	defer ps.Close()
	_, err = ps.Receive(t.Context()) // the subscription is in place
	require.NoError(t, err)
	waitWaiting(t, b, "k")
	waitListeners(t, c, "k", 1, sub)
	require.NoError(t, la.Unlock(t.Context()))
	select {
	case m := <-ps.Channel():
		assert.Equal(t, place, m.Payload, "the unlock named b")
	case <-time.After(5 * time.Second):
		t.Fatal("no announcement")
	}
	select {
	case err := <-got:
		require.NoError(t, err, "b obtained the lock after the announced release")
	case <-time.After(5 * time.Second):
		t.Fatal("b slept through the release: its retry delay is a minute")
	}
	settle(b)
	left := 0
	for _, m := range c.srv {
		if members, _ := m.ZMembers(lineKey("k")); !slices.Contains(members, place) {
			left++
		}
	}
	// A node that b's winning round did not reach, or reached before the
	// release, may keep the entry until the line expires.
	assert.Greater(t, left, len(c.srv)/2, "b left the line: %v", dumpLines(c, "k"))
}

// TestNextInLineDeadOrLost: a release that names a waiter which died (it
// never takes the key), or that names nobody because the line was lost,
// stalls a live waiter for no longer than its grace: it obtains the lock
// long before its own retry delay (a minute).
func TestNextInLineDeadOrLost(t *testing.T) {
	for _, tc := range []struct {
		name string
		fix  func(c *cluster)
	}{
		{"dead waiter first", func(c *cluster) {
			for _, m := range c.srv {
				_, err := m.ZAdd(lineKey("k"), 1, "1:dead")
				require.NoError(t, err)
			}
		}},
		{"line lost", func(c *cluster) {
			for _, m := range c.srv {
				m.Del(lineKey("k"))
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			c := newCluster(t, 3)
			c.tune = func(tn *tunables) { tn.graceCap = 200 * time.Millisecond }
			a := c.client(t, nil)
			b := c.client(t, &Options{MinRetryDelay: time.Minute, MaxRetryDelay: time.Minute})
			la, err := a.Lock(t.Context(), "k", time.Minute)
			require.NoError(t, err)
			c.waitHolders(t, "k", la.Token(), 3) // Lock returned at a quorum
			got := lockAsync(b, "k", 10*time.Second)
			waitInLine(t, c, "k")
			tc.fix(c)
			waitWaiting(t, b, "k")
			waitListeners(t, c, "k", 1)
			start := time.Now()
			require.NoError(t, la.Unlock(t.Context()))
			select {
			case err := <-got:
				require.NoError(t, err)
				assert.Less(t, time.Since(start), 5*time.Second, "within the grace, not the minute's retry")
			case <-time.After(5 * time.Second):
				t.Fatal("b stalled beyond its grace")
			}
		})
	}
}

// TestYieldToNamed: without handoffs on the node, a client that unlocks
// and locks again at once lets the waiter its release named go first, instead of taking the key back before
// that waiter's round arrives. (The releasing client heard the announcement
// because it waited for the key before.)
func TestYieldToNamed(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	// The grace that a yielding first round gives the named waiter once it
	// is announced is one second here (1 ms in production), so that b's
	// slow round always makes it.
	c.tune = func(tn *tunables) { tn.yieldWindow, tn.graceFloor = 2*time.Second, time.Second }
	c.waiting = WaitInLine
	slow := &Options{MinRetryDelay: time.Minute, MaxRetryDelay: time.Minute}
	holder, a := c.client(t, nil), c.client(t, slow)
	// b's scripts take 30 ms longer, so that a, locking again at once,
	// would win every race against b's round if it did not yield.
	late := &faultHook{before: func() { time.Sleep(30 * time.Millisecond) }}
	late.selectCmds(lockScript)
	b := c.hookedClient(t, late, &Options{MinRetryDelay: time.Minute, MaxRetryDelay: time.Minute, NodeTimeout: 2 * time.Second})
	lh, err := holder.Lock(t.Context(), "k", time.Minute)
	require.NoError(t, err)

	order := make(chan string, 3)
	la := make(chan *Lock, 1)
	go func() {
		l, err := a.Lock(context.Background(), "k", 10*time.Second)
		if err == nil {
			order <- "a"
			la <- l
		}
	}()
	waitInLine(t, c, "k")                         // a is first in line
	time.Sleep(2 * ticketStep * time.Millisecond) // b's ticket is a later one
	got := make(chan error, 1)
	go func() {
		l, err := b.Lock(context.Background(), "k", 10*time.Second)
		if err == nil {
			order <- "b"
			err = l.Unlock(context.Background())
		}
		got <- err
	}()
	require.Eventually(t, func() bool {
		n := 0
		for _, m := range c.srv {
			if members, _ := m.ZMembers(lineKey("k")); len(members) == 2 {
				n++
			}
		}
		return n > len(c.srv)/2
	}, 10*time.Second, time.Millisecond, "b is second in line")
	waitWaiting(t, a, "k")
	waitWaiting(t, b, "k")
	waitListeners(t, c, "k", 2)
	require.NoError(t, lh.Unlock(t.Context()))
	l := <-la
	require.NoError(t, l.Unlock(t.Context())) // names b
	again, err := a.Lock(t.Context(), "k", time.Second)
	require.NoError(t, err)
	order <- "a again"
	require.NoError(t, again.Unlock(t.Context()))
	require.NoError(t, <-got)
	assert.Equal(t, "a", <-order)
	assert.Equal(t, "b", <-order, "b, named by a's release, went before a's next lock")
	assert.Equal(t, "a again", <-order)
}

// TestInLineLeaves: a waiter that gives up takes its entry off the line on
// every node, and an unlock takes the holder's entry off the nodes where
// its round was refused and joined: a release there would otherwise name a
// waiter that no longer waits, and the others would give it a grace for
// nothing.
func TestInLineLeaves(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	c.waiting = WaitInLine
	a := c.client(t, nil)
	b := c.client(t, &Options{MinRetryDelay: time.Minute, MaxRetryDelay: time.Minute})
	la, err := a.TryLock(t.Context(), "k", time.Minute) // joins no line, even where its round comes late
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = b.Lock(ctx, "k", time.Minute)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	lineEmpty := func() bool {
		for _, m := range c.srv {
			if members, _ := m.ZMembers(lineKey("k")); len(members) > 0 {
				return false
			}
		}
		return true
	}
	require.Eventually(t, lineEmpty, 5*time.Second, time.Millisecond, "the waiter that gave up is still in line: %v", dumpLines(c, "k"))

	// cl's direct round, which joins no line, is refused on nodes 0 and 1,
	// held by another client, and its waiter's first round joins their
	// lines at once; node 1 lets the key go, and the waiter's next round
	// obtains the lock, refused on node 0 alone, where cl's entry stays
	// until its lock's unlock takes it off.
	require.NoError(t, la.Unlock(t.Context()))
	for _, m := range c.srv[:2] {
		require.NoError(t, m.Set("k", "other"))
		m.SetTTL("k", time.Minute)
	}
	cl := c.client(t, nil)
	lc, ec := lockLater(cl, "k", time.Minute)
	inLine := func(i int) bool { members, _ := c.srv[i].ZMembers(lineKey("k")); return len(members) == 1 }
	require.Eventually(t, func() bool { return inLine(0) && inLine(1) }, 5*time.Second, time.Millisecond,
		"the waiter's first round joined the lines where it was refused: %v", dumpLines(c, "k"))
	c.srv[1].Del("k")
	l := <-lc
	require.NoError(t, <-ec)
	require.Eventually(t, func() bool { return inLine(0) }, 5*time.Second, time.Millisecond,
		"the holder's entry stays where its rounds were refused (its answer may follow the quorum's)")
	require.NoError(t, l.Unlock(t.Context()))
	require.Eventually(t, lineEmpty, 5*time.Second, time.Millisecond, "the holder is still in line: %v", dumpLines(c, "k"))
}
