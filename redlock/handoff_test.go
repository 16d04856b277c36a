package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
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
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// lockLater runs cl.Lock(key, ttl) in the background and sends its lock
// (nil on error) and error.
func lockLater(cl *Client, key string, ttl time.Duration) (<-chan *Lock, <-chan error) {
	lc, ec := make(chan *Lock, 1), make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		l, err := cl.Lock(ctx, key, ttl)
		lc <- l
		ec <- err
	}()
	return lc, ec
}

// waitHandChannel waits until cl's hand channel is subscribed on every
// node, and cl waits for key: a release can then hand key off to cl's
// waiter.
func waitHandChannel(t *testing.T, c *cluster, cl *Client, key string) {
	t.Helper()
	waitWaiting(t, cl, key)
	require.Eventually(t, func() bool {
		for _, m := range c.srv {
			if m.PubSubNumSub(cl.handChannel())[cl.handChannel()] != 1 {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "the client's hand channel subscribed on every node")
}

// primeHandChannel makes cl subscribe its hand channel, as a client does
// at its first wait for any key: its waiters join for handoffs from their
// first round on (before, they join to be named only).
func primeHandChannel(t *testing.T, cl *Client) {
	t.Helper()
	ch := cl.waker().Listen(cl.stored("prime"), time.Time{})
	require.Eventually(t, cl.ledger().Subscribed, 5*time.Second, time.Millisecond)
	ch.Close()
}

// heardHandoff waits until cl's ledger counts node's handoff to the round
// with token.
func heardHandoff(t *testing.T, cl *Client, token string, node int) {
	t.Helper()
	require.Eventually(t, func() bool { return cl.ledger().HandedNodes(token)&(1<<node) != 0 }, 5*time.Second, time.Millisecond,
		"node %d's handoff announcement reached the client", node)
}

// listenedLately makes cl listen for key's release, as a wait for it does:
// until the Waker's idle time has passed, cl's Lock of key goes to its
// waiter at once, whose first round joins the line (see waiting.Strategy.Direct).
func listenedLately(cl *Client, key string) {
	cl.waker().Listen(cl.stored(key), time.Time{}).Close()
}

// entries returns the entries of key's line on node i.
func entries(t *testing.T, c *cluster, i int, key string) []string {
	t.Helper()
	if !c.srv[i].Exists(lineKey(key)) {
		return nil
	}
	m, err := c.srv[i].ZMembers(lineKey(key))
	require.NoError(t, err)
	return m
}

// waitsInLine reports whether cl's waiter for key has an entry in the key's
// line on a quorum of the nodes (a round is not sent to a node whose
// earlier requests are still busy once its outcome is decided, so a
// waiter may miss a node's line).
func waitsInLine(t *testing.T, c *cluster, key string, cl *Client) bool {
	n := 0
	for i := range c.srv {
		if slices.ContainsFunc(entries(t, c, i, key), func(e string) bool { return strings.HasSuffix(e, "|"+cl.handChannel()) }) {
			n++
		}
	}
	return n > len(c.srv)/2
}

// TestHandoff: a waiter of another client joins the key's line for a
// handoff; the holder's unlock sets the key to the waiter's hand value on
// the nodes instead of deleting it, and the waiter holds the lock without
// a round of its own (its retry delay is a minute). Its validity counts
// from before its round, and its unlock leaves nothing behind. On a busy
// machine one attempt may end with a round instead (a node's handoff came
// late, or the round that joined missed a node): up to three attempts are
// made, on keys of their own, and one must be a handoff.
func TestHandoff(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	// Wait long for the other nodes' handoffs once one came (10 ms in
	// production), so that a slow machine does not make b take the keys
	// with a round.
	c.tune = func(tn *tunables) { tn.yieldWindow = time.Second }
	a := c.client(t, nil)
	b := c.client(t, &Options{MinRetryDelay: time.Minute, MaxRetryDelay: time.Minute})
	require.NotEmpty(t, b.handChannel(), "a Client without fencing takes handoffs")
	primeHandChannel(t, b)
	for try := range 3 {
		key := fmt.Sprintf("k%d", try)
		la, err := a.Lock(t.Context(), key, time.Minute)
		require.NoError(t, err)
		settle(a) // Lock returned at a quorum
		began := time.Now()
		lc, ec := lockLater(b, key, 10*time.Second)
		entry := waitInLine(t, c, key)
		assert.True(t, strings.HasSuffix(entry, "|10000|"+b.handChannel()), "the entry %q names the ttl and b's hand channel", entry)
		waitHandChannel(t, c, b, key)
		require.NoError(t, la.Unlock(t.Context()))
		var lb *Lock
		select {
		case lb = <-lc:
			require.NoError(t, <-ec)
		case <-time.After(10 * time.Second):
			t.Fatal("b slept through the handoff: its retry delay is a minute")
		}
		settle(a) // the unlock returned at a quorum
		handed := strings.HasPrefix(lb.Token(), protocol.HandPrefix)
		if handed {
			held := 0
			for _, m := range c.srv {
				if v, _ := value(m, key); v == lb.Token() {
					held++
				}
			}
			assert.Greater(t, held, len(c.srv)/2, "a quorum of nodes handed the key off")
			assert.False(t, lb.Until().After(began.Add(10*time.Second)), "the validity counts from before b's round")
			assert.True(t, lb.Until().After(time.Now().Add(5*time.Second)))
			require.NoError(t, lb.Extend(t.Context(), 10*time.Second), "a lock handed off extends like any other")
		}
		require.NoError(t, lb.Unlock(t.Context()))
		settle(b)
		for i, m := range c.srv {
			v, _ := value(m, key)
			assert.True(t, v == "" || strings.HasPrefix(v, protocol.TombstonePrefix), "node %d: %s left holding %q", i, key, v)
			// An entry of b's that a node kept (its round joined there after
			// the node's release) leaves with the release that pops it and
			// hands the key to that round, a stray handoff that b releases.
			assert.Eventually(t, func() bool {
				return !slices.ContainsFunc(entries(t, c, i, key), func(e string) bool { return strings.HasSuffix(e, "|"+b.handChannel()) })
			}, 5*time.Second, time.Millisecond, "node %d: b left the line", i)
		}
		if handed {
			return
		}
		t.Logf("attempt %d: b took %s with a round", try, key)
	}
	t.Fatal("no attempt handed the key off on the nodes")
}

// handTokens returns the tokens of cl's entries in key's line on the
// nodes.
// waitHandInLine waits until cl has one entry in key's line on every node
// (for a handoff), and returns the token of the one on node 0.
func waitHandInLine(t *testing.T, c *cluster, key string, cl *Client) string {
	t.Helper()
	var first string
	require.Eventually(t, func() bool {
		tokens := handTokens(t, c, key, cl)
		if len(tokens) == len(c.srv) {
			first = tokens[0]
		}
		return first != ""
	}, 5*time.Second, time.Millisecond, "the waiter is in line on every node")
	return first
}

// dropEntries takes cl's entries off key's line on node i, as a node that
// lost them.
func dropEntries(t *testing.T, c *cluster, i int, key string, cl *Client) {
	t.Helper()
	for _, e := range entries(t, c, i, key) {
		if strings.HasSuffix(e, "|"+cl.handChannel()) {
			_, err := c.srv[i].ZRem(lineKey(key), e)
			require.NoError(t, err)
		}
	}
}

func handTokens(t *testing.T, c *cluster, key string, cl *Client) []string {
	var tokens []string
	for i := range c.srv {
		for _, e := range entries(t, c, i, key) {
			if rest, ok := strings.CutSuffix(e, "|"+cl.handChannel()); ok {
				ids := rest[:strings.LastIndex(rest, "|")]
				tokens = append(tokens, ids[(len(ids)+1)/2:])
			}
		}
	}
	return tokens
}

// TestHandoffSkipsDeadWaiter: a waiter whose client is gone (its process
// died: its connections closed) is skipped: no node hands the key off to
// it, and the next in line gets the key. The negative control keeps the
// dead waiter's hand channel subscribed, as a hung process would: the release
// then hands the key off to it, and the next waiter gets the key only
// once that has expired.
func TestHandoffSkipsDeadWaiter(t *testing.T) {
	for _, hung := range []bool{false, true} {
		name := "dead"
		if hung {
			name = "hung (negative control)"
		}
		t.Run(name, func(t *testing.T) {
			leakcheck.Check(t)
			// b's Close may catch one of its rounds in flight, whose release
			// takes b's entries off the line, as a live Client does: b then
			// did not die in line, and the scenario runs again.
			for try := 1; !skipsDeadWaiter(t, hung); try++ {
				if try == 3 {
					t.Fatal("b's Close caught a round in flight three times")
				}
				t.Logf("attempt %d: b's Close caught a round in flight, which took its entries off the line", try)
			}
		})
	}
}

// skipsDeadWaiter runs TestHandoffSkipsDeadWaiter's scenario once. It
// reports false, having checked nothing, when b left no entry in line.
func skipsDeadWaiter(t *testing.T, hung bool) bool {
	c := newCluster(t, 3)
	slow := &Options{MinRetryDelay: 50 * time.Millisecond, MaxRetryDelay: 50 * time.Millisecond}
	a, b, d := c.client(t, nil), c.client(t, slow), c.client(t, slow)
	primeHandChannel(t, b)
	primeHandChannel(t, d)
	la, err := a.Lock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	settle(a) // Lock returned at a quorum
	_, bErr := lockLater(b, "k", time.Second)
	waitInLine(t, c, "k")
	waitHandChannel(t, c, b, "k")
	time.Sleep(2 * ticketStep * time.Millisecond) // d's ticket is a later one
	lc, ec := lockLater(d, "k", 10*time.Second)
	require.Eventually(t, func() bool { return waitsInLine(t, c, "k", d) }, 10*time.Second, time.Millisecond, "d is in line: %v", dumpLines(c, "k"))
	waitHandChannel(t, c, d, "k")
	if hung {
		for _, n := range c.nodes {
			ps := n.Subscribe(t.Context(), b.handChannel())
			_, err := ps.Receive(t.Context())
			require.NoError(t, err)
			t.Cleanup(func() { _ = ps.Close() })
		}
	}
	// b's process dies: its Client stops at once and sends nothing more.
	require.NoError(t, b.Close())
	require.ErrorIs(t, <-bErr, ErrClosed)
	// b's entries, read once Close has waited for its calls in flight
	// (b's rounds replace its entry every MaxRetryDelay).
	bTokens := handTokens(t, c, "k", b)
	if len(bTokens) == 0 {
		return false
	}
	want := 0 // the servers saw b's connections close
	if hung {
		want = 1
	}
	require.Eventually(t, func() bool {
		for _, m := range c.srv {
			if m.PubSubNumSub(b.handChannel())[b.handChannel()] != want {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond)
	require.NoError(t, la.Unlock(t.Context()))
	settle(a)
	toB := 0 // nodes that handed the key off to b
	for _, m := range c.srv {
		if v, _ := value(m, "k"); slices.ContainsFunc(bTokens, func(tok string) bool { return v == protocol.HandPrefix+tok }) {
			toB++
		}
	}
	if hung {
		assert.Positive(t, toB, "handed off to the hung waiter, which keeps it until its TTL")
	} else {
		assert.Zero(t, toB, "the dead waiter was skipped")
	}
	select {
	case ld := <-lc:
		require.NoError(t, <-ec, "d got the key")
		require.NoError(t, ld.Unlock(t.Context()))
	case <-time.After(15 * time.Second):
		t.Fatal("d never got the key")
	}
	return true
}

// TestHandoffStray: a release that hands the key off to an entry that no
// waiter of its client expects any more (a round that obtained the lock
// elsewhere, or gave up, while its entry was still in the line) is
// released again by that client at once, and the key does not stay held.
func TestHandoffStray(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	a, b := c.client(t, nil), c.client(t, nil)
	la, err := a.Lock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	primeHandChannel(t, b) // b's hand channel stays subscribed for the idle time
	token := protocol.NewToken("")
	for _, m := range c.srv {
		_, err := m.ZAdd(lineKey("k"), 1, protocol.NewToken("")+"|"+token+"|60000|"+b.handChannel())
		require.NoError(t, err)
	}
	require.NoError(t, la.Unlock(t.Context()))
	require.Eventually(t, func() bool {
		for _, m := range c.srv {
			if m.Exists("k") {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "the stray handoff was released")
}

// TestHandoffStrayLate, on real servers: a handoff that turns stray and
// whose release comes only after the key is free again (a slow node handed
// the key over to a round of the Client's last waiter after its Unlock
// began, and the Unlock released it there first) takes only that hand
// value off. The entry of the Client's next waiter for the key, already in
// line on that node, stays, and the node hands the key off to it.
func TestHandoffStrayLate(t *testing.T) {
	leakcheck.Check(t)
	s := redisproc.StartT(t, 3)
	a, err := Open(s.Addrs, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	b, err := Open(s.Addrs, &Options{MinRetryDelay: time.Minute, MaxRetryDelay: time.Minute})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	key := b.stored("k")
	// b is subscribed to k from an earlier wait: its waiter's first round
	// is its only one.
	ch := b.waker().Listen(key, time.Time{})
	require.Eventually(t, func() bool { return b.ledger().Subscribed() && !b.waker().Confirming(key) }, 5*time.Second, time.Millisecond)
	ch.Close()
	raw := make([]*redis.Client, len(s.Addrs))
	for i, addr := range s.Addrs {
		raw[i] = redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = raw[i].Close() })
	}
	mine := func(i int) []string { // b's entries in k's line on node i
		all, err := raw[i].ZRange(t.Context(), lineKey("k"), 0, -1).Result()
		require.NoError(t, err)
		return slices.DeleteFunc(all, func(e string) bool { return !strings.HasSuffix(e, "|"+b.handChannel()) })
	}

	la, err := a.Lock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	settle(a) // a holds k on every node
	lc, ec := lockLater(b, "k", 10*time.Second)
	require.Eventually(t, func() bool { return len(mine(0)) == 1 && len(mine(1)) == 1 && len(mine(2)) == 1 },
		5*time.Second, time.Millisecond, "b's waiter is in line on every node")
	entry := mine(0)[0]
	b.handoffs().ReleaseStray(0, protocol.NewToken(""), key) // the late release of a stray handoff
	assert.Equal(t, []string{entry}, mine(0), "b's waiter kept its place on node 0")

	require.NoError(t, la.Unlock(t.Context()))
	lb := <-lc
	require.NoError(t, <-ec)
	tok, handed := strings.CutPrefix(lb.Token(), protocol.HandPrefix)
	require.True(t, handed, "b's lock was handed off on the nodes")
	require.Eventually(t, func() bool { return bits.OnesCount64(b.ledger().HandedNodes(tok)) == len(s.Addrs) }, 5*time.Second, time.Millisecond,
		"every node handed k off to b's waiter")
	require.NoError(t, lb.Unlock(t.Context()))
	settle(a)
	settle(b)
	for i, r := range raw {
		v, err := r.Get(t.Context(), "k").Result()
		if err == nil {
			assert.True(t, strings.HasPrefix(v, protocol.TombstonePrefix), "node %d: k left holding %q", i, v)
		}
	}
}

// TestHandoffLostRegistration: when some nodes lost the line, the release
// hands the key off on the others and deletes it on those; the waiter,
// handed off fewer than a quorum, takes the handed keys as its own in a
// round, within a grace, long before its own retry delay.
func TestHandoffLostRegistration(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 5)
	a := c.client(t, nil)
	b := c.client(t, &Options{MinRetryDelay: time.Minute, MaxRetryDelay: time.Minute})
	primeHandChannel(t, b)
	la, err := a.Lock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	settle(a) // Lock returned at a quorum
	lc, ec := lockLater(b, "k", 10*time.Second)
	waitInLine(t, c, "k")
	waitHandChannel(t, c, b, "k")
	for _, m := range c.srv[2:] {
		m.Del(lineKey("k")) // 3 of 5 lose the line: 2 hand off, a quorum needs 3
	}
	require.NoError(t, la.Unlock(t.Context()))
	select {
	case lb := <-lc:
		require.NoError(t, <-ec)
		// By a round, unless b's round reached a node only after its line
		// was deleted (a busy machine), which then handed off as well.
		t.Logf("b's lock: %s", lb.Token())
		require.NoError(t, lb.Unlock(t.Context()))
	case <-time.After(10 * time.Second):
		t.Fatal("b stalled: its retry delay is a minute")
	}
	settle(a)
	settle(b)
	for i, m := range c.srv {
		// A tombstone may stay where b's winning round was not sent.
		v, _ := value(m, "k")
		assert.True(t, v == "" || strings.HasPrefix(v, protocol.TombstonePrefix), "node %d: nothing left, not %q", i, v)
	}
}

// TestHandoffTopUp: a lock that a handoff gave is also acquired on a node
// where the waiter's round did not join the line (the key was free there:
// the round was granted, then released with the failed round), so that the
// waiters that come next join there too and the next release hands the key
// on from that node as well. The negative control (no top-up) leaves the
// node without the key.
func TestHandoffTopUp(t *testing.T) {
	for _, topUp := range []bool{true, false} {
		t.Run(fmt.Sprintf("topUp=%v", topUp), func(t *testing.T) {
			leakcheck.Check(t)
			c := newCluster(t, 5)
			c.tune = func(tn *tunables) { tn.yieldWindow, tn.noTopUp = time.Second, !topUp }
			a, b := handoffPair(t, c)
			for try := range 3 {
				key := fmt.Sprintf("k%d", try)
				listenedLately(b, key) // b's first round is its waiter's, which joins the line
				la, err := a.Lock(t.Context(), key, time.Minute)
				require.NoError(t, err)
				settle(a)
				c.srv[0].Del(key) // node 0 lost a's key: b's round is granted there
				lc, ec := lockLater(b, key, 10*time.Second)
				require.Eventually(t, func() bool { return waitsInLine(t, c, key, b) }, 5*time.Second, time.Millisecond)
				waitHandChannel(t, c, b, key)
				require.NoError(t, la.Unlock(t.Context()))
				lb := <-lc
				require.NoError(t, <-ec)
				settle(a)
				settle(b)
				if !strings.HasPrefix(lb.Token(), protocol.HandPrefix) {
					t.Logf("attempt %d: b took %s with a round", try, key)
					require.NoError(t, lb.Unlock(t.Context()))
					continue
				}
				v, _ := value(c.srv[0], key)
				if topUp {
					assert.Equal(t, lb.Token(), v, "node 0 holds the key for the lock too")
				} else {
					assert.NotEqual(t, lb.Token(), v, "without the top-up node 0 does not hold the key")
				}
				require.NoError(t, lb.Unlock(t.Context()))
				settle(b)
				for i, m := range c.srv {
					v, _ := value(m, key)
					assert.True(t, v == "" || strings.HasPrefix(v, protocol.TombstonePrefix), "node %d: %s left holding %q", i, key, v)
					assert.Empty(t, entries(t, c, i, key), "node %d: the line is empty", i)
				}
				return
			}
			t.Fatal("no attempt handed the key off on the nodes")
		})
	}
}

// TestHandoffLateAfterUnlock: a node whose release by the holder comes
// late hands the key off to the waiter after the waiter, which held the
// lock by the other nodes' handoffs, has already sent its own unlock there
// (which found the holder's token). That handoff is stray: the waiter's
// client releases it at once, also while its unlock still waits for
// another node, instead of leaving the key held for the lock's TTL.
func TestHandoffLateAfterUnlock(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	c.tune = func(tn *tunables) { tn.yieldWindow = time.Second }
	a, b := handoffPair(t, c)
	la, err := a.Lock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	settle(a)
	lc, ec := lockLater(b, "k", 10*time.Second)
	waitHandInLine(t, c, "k", b)
	waitHandChannel(t, c, b, "k")

	lateA := holdCmds(c.hooks[2], la.Token()) // a's release is slow on node 2
	t.Cleanup(lateA)
	require.NoError(t, la.Unlock(t.Context()))
	lb := <-lc
	require.NoError(t, <-ec)
	require.True(t, strings.HasPrefix(lb.Token(), protocol.HandPrefix), "b holds the lock by the handoffs of nodes 0 and 1")

	slowB := holdCmds(c.hooks[0], lb.Token()) // b's unlock waits for node 0
	t.Cleanup(slowB)
	unlocked := make(chan error, 1)
	go func() { unlocked <- lb.Unlock(context.Background()) }()
	require.Eventually(t, func() bool {
		return slices.ContainsFunc(c.hooks[2].commands(), func(s string) bool { return strings.Contains(s, lb.Token()) })
	}, 5*time.Second, time.Millisecond, "b's unlock reached node 2")
	settleNode(b, 2)
	lateA() // node 2 hands the key off to b's entry, still in its line
	require.Eventually(t, func() bool { v, _ := value(c.srv[2], "k"); return v != la.Token() }, 5*time.Second, time.Millisecond)
	drain(t, c, b) // node 2's handoff reached b
	slowB()
	<-unlocked
	if !assert.Eventually(t, func() bool { return !held(c.srv[2], "k") }, 5*time.Second, time.Millisecond) {
		v, _ := value(c.srv[2], "k")
		t.Errorf("node 2 kept the late handoff: %q", v)
	}
}

// TestHandoffLocalAfterJoin: a round that joined the line on a node and
// that the node's release then handed the key to, while the round was
// still out, obtains the lock on the other nodes; its Unlock hands the lock
// over to the next caller of its Client, whose round takes the handed key
// over as the previous lock's. Nothing stays held once that caller is done.
func TestHandoffLocalAfterJoin(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	a, b := handoffPair(t, c)
	listenedLately(b, "k")
	la, err := a.Lock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	settle(a)
	c.srv[0].Del("k")
	c.srv[1].Del("k") // a holds node 2 only: b's round is granted on 0 and 1

	late := []func(){holdCmds(c.hooks[0], b.handChannel()), holdCmds(c.hooks[1], b.handChannel())}
	t.Cleanup(func() {
		for _, f := range late {
			f()
		}
	})
	lc, ec := lockLater(b, "k", time.Minute)
	require.Eventually(t, func() bool {
		return slices.ContainsFunc(entries(t, c, 2, "k"), func(e string) bool { return strings.HasSuffix(e, "|"+b.handChannel()) })
	}, 5*time.Second, time.Millisecond, "b's round joined the line on node 2")
	require.ErrorIs(t, la.Unlock(t.Context()), ErrNotHeld, "a held node 2 only") // and hands it off there
	var hand string
	require.Eventually(t, func() bool { hand, _ = value(c.srv[2], "k"); return strings.HasPrefix(hand, protocol.HandPrefix) },
		5*time.Second, time.Millisecond, "node 2 handed the key off to b's round")
	heardHandoff(t, b, strings.TrimPrefix(hand, protocol.HandPrefix), 2)
	for _, f := range late {
		f()
	}
	l1 := <-lc
	require.NoError(t, <-ec)
	require.False(t, strings.HasPrefix(l1.Token(), protocol.HandPrefix), "b's round obtained the lock on nodes 0 and 1")

	lc2, ec2 := lockLater(b, "k", time.Minute)
	require.Eventually(t, func() bool { return b.queue.Waiting("k") == 1 }, 5*time.Second, time.Millisecond, "a second caller of b waits")
	require.NoError(t, l1.Unlock(t.Context())) // hands the lock over to the second caller
	l2 := <-lc2
	require.NoError(t, <-ec2)
	require.NoError(t, l2.Unlock(t.Context()))
	settle(b)
	for i, m := range c.srv {
		v, _ := value(m, "k")
		assert.False(t, held(m, "k"), "node %d: k left holding %q", i, v)
	}
}

// holdCmds makes the scripts that name token wait on h's node until the
// returned function is called.
func holdCmds(h *faultHook, token string) (release func()) {
	gate := make(chan struct{})
	h.selectCmds(func(cmd redis.Cmder) bool { return lockScript(cmd) && strings.Contains(fmt.Sprint(cmd.Args()), token) })
	h.set(func() { <-gate }, nil)
	var once sync.Once
	return func() { once.Do(func() { close(gate) }) }
}

// settleNode waits until cl has no request in flight to node i.
func settleNode(cl *Client, i int) { cl.nodes[i].Wait() }

// handoffPair returns a holder's client and a waiter's client whose
// retries wait a minute, so that the waiter obtains a lock within a test
// only by a handoff or an announcement; the waiter's hand channel is
// subscribed.
func handoffPair(t *testing.T, c *cluster) (a, b *Client) {
	t.Helper()
	a = c.client(t, nil)
	b = c.client(t, &Options{MinRetryDelay: time.Minute, MaxRetryDelay: time.Minute})
	primeHandChannel(t, b)
	return a, b
}

// drain waits until cl has taken in every message that the nodes
// published to it so far: the handoffs told on its hand channel (a stray one
// starts its release) and the announcements of the keys it is subscribed
// to. A node delivers its messages to a subscriber in order, so drain
// tells cl, on its hand channel on every node, of a handoff to a round that cl
// expects for this alone, and waits until cl counted every node's.
func drain(t *testing.T, c *cluster, cl *Client) {
	t.Helper()
	token := protocol.NewToken("")
	cl.ledger().Expect(token, "drain")
	defer cl.ledger().Forget(token, false)
	hand := protocol.HandPrefix + token
	for _, m := range c.srv {
		m.Publish(cl.handChannel(), fmt.Sprintf("%d:%sdrain", len(hand), hand))
	}
	require.Eventually(t, func() bool { return bits.OnesCount64(cl.ledger().HandedNodes(token)) == len(c.srv) }, 5*time.Second, time.Millisecond,
		"the nodes' messages reached the client")
}

// TestHandoffCleared: once every node has handed a key off to a waiter's
// only round (each popping the round's entry), the Client knows that it
// has no entry left in the key's line, and its next waiter's first round
// does not look for one (protocol.Acquire.Cleared): an entry of the
// Client's planted on a node stays. When a node did not hand the key off
// (it lost the line), the next first round looks for the Client's
// entries and takes the planted one off: the negative control.
func TestHandoffCleared(t *testing.T) {
	for _, lost := range []bool{false, true} {
		t.Run(fmt.Sprintf("lost=%v", lost), func(t *testing.T) {
			leakcheck.Check(t)
			c := newCluster(t, 3)
			c.tune = func(tn *tunables) { tn.yieldWindow = time.Second }
			a, b := handoffPair(t, c)
			mine := func(i int) []string { // b's entries on node i
				var out []string
				for _, e := range entries(t, c, i, "k") {
					if strings.HasSuffix(e, "|"+b.handChannel()) {
						out = append(out, e)
					}
				}
				return out
			}
			// Two handoffs: the first wait subscribes b to the key, which
			// costs its waiter a second round (see wake.Waker.Listen).
			for cycle := range 2 {
				la, err := a.Lock(t.Context(), "k", time.Minute)
				require.NoError(t, err)
				// Lock returns at a quorum: wait for a's acquire on the
				// last node, or b's round may get there first and be
				// granted there instead of joining the line.
				settle(a)
				lc, ec := lockLater(b, "k", 10*time.Second)
				require.Eventually(t, func() bool {
					for i := range c.srv {
						if len(mine(i)) == 0 {
							return false
						}
					}
					return true
				}, 5*time.Second, time.Millisecond, "b is in line on every node")
				waitHandChannel(t, c, b, "k")
				if lost && cycle == 1 {
					c.srv[2].Del(lineKey("k")) // node 2 deletes the key instead
				}
				require.NoError(t, la.Unlock(t.Context()))
				lb := <-lc
				require.NoError(t, <-ec)
				// (Without node 2, b may take the key with a round, after node
				// 2's announcement: either way no node is cleared.)
				if tok, handed := strings.CutPrefix(lb.Token(), protocol.HandPrefix); cycle == 1 && !lost {
					require.True(t, handed, "b's lock was handed off on the nodes")
					require.True(t, b.handoffs().Sole(lb.token), "b's waiter made one round")
					require.Eventually(t, func() bool { return bits.OnesCount64(b.ledger().HandedNodes(tok)) == len(c.srv) }, 5*time.Second, time.Millisecond)
				}
				require.NoError(t, lb.Unlock(t.Context()))
				settle(a)
				settle(b)
				// a's release on a slow node may come after b's unlock and
				// hand the key off to b's finished round: b releases that
				// stray handoff when the node announces it.
				require.Eventually(t, func() bool { return c.keys("k") == 0 }, 5*time.Second, time.Millisecond, "k is free on every node")
				// An announcement of this cycle that reached b only while its
				// next waiter's round was out would wake that waiter.
				drain(t, c, b)
			}

			stale := protocol.NewToken("") + "|" + protocol.NewToken("") + "|10000|" + b.handChannel()
			_, err := c.srv[0].ZAdd(lineKey("k"), 1e15, stale) // last in line
			require.NoError(t, err)
			la, err := a.Lock(t.Context(), "k", time.Minute)
			require.NoError(t, err)
			settle(a)
			lc, ec := lockLater(b, "k", 10*time.Second)
			require.Eventually(t, func() bool {
				return slices.ContainsFunc(mine(0), func(e string) bool { return e != stale })
			}, 5*time.Second, time.Millisecond, "b's next waiter joined on node 0")
			if lost {
				assert.NotContains(t, mine(0), stale, "the first round looked for b's entries and took the planted one off")
			} else {
				assert.Contains(t, mine(0), stale, "the first round did not look for b's entries")
			}
			c.srv[0].ZRem(lineKey("k"), stale)
			require.NoError(t, la.Unlock(t.Context()))
			lb := <-lc
			require.NoError(t, <-ec)
			require.NoError(t, lb.Unlock(t.Context()))
		})
	}
}

// TestHandoffLeaves: a waiter that obtained the lock after several rounds
// in line, by a handoff (or a round, if one raced it), sends no release to
// leave the line: each round replaced the previous one's entry, and the
// handoff popped the last (or the lock's release takes it off). A
// waiter that gives up sends one release to each node, whatever its
// rounds, which takes its entries off. Neither leaves an entry behind.
func TestHandoffLeaves(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	c.tune = func(tn *tunables) { tn.yieldWindow = time.Second }
	a := c.client(t, nil)
	releases := &cmdCounter{match: isScript(scripts.Release)}
	// A round that a node does not answer in time is released there: a
	// loaded machine's 50 ms would add releases that are not leaves.
	b := c.hookedClient(t, releases, &Options{MinRetryDelay: 20 * time.Millisecond, MaxRetryDelay: 20 * time.Millisecond, NodeTimeout: time.Second})
	primeHandChannel(t, b)
	la, err := a.Lock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	settle(a)

	// b's later rounds replace its first round's entry. While the line
	// is whole, b only reads it; node 0 then loses b's entry, which b's
	// next read finds, and a later round joins again.
	lc, ec := lockLater(b, "k", 10*time.Second)
	first := waitHandInLine(t, c, "k", b)
	dropEntries(t, c, 0, "k", b)
	require.Eventually(t, func() bool {
		return slices.ContainsFunc(handTokens(t, c, "k", b), func(tok string) bool { return tok != first })
	}, 5*time.Second, time.Millisecond, "a later round of b's joined")
	waitHandChannel(t, c, b, "k")
	require.NoError(t, la.Unlock(t.Context()))
	lb := <-lc
	require.NoError(t, <-ec)
	drain(t, c, b) // a handoff heard after the unlock would be stray, and released
	settle(b)
	if strings.HasPrefix(lb.Token(), protocol.HandPrefix) {
		assert.Zero(t, releases.n.Load(), "releases sent by a waiter that obtained the lock")
	} else {
		// A round of b's raced the handoffs, and a round that failed on
		// the way releases where it was granted: not a leave to count.
		t.Log("b obtained the lock by a round")
	}
	releases.n.Store(0)
	require.NoError(t, lb.Unlock(t.Context()))
	settle(b)
	assert.Equal(t, int64(len(c.srv)), releases.n.Load(), "b's unlock, one release per node")

	// A waiter that gives up after several rounds.
	la, err = a.Lock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	settle(a)
	releases.n.Store(0)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = b.Lock(ctx, "k", 10*time.Second)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	settle(b)
	// One leave per node. A round that the deadline cut short is released
	// too, where it was not refused: one release more per node at most.
	// Every earlier round's leave, as before, would be one per node each:
	// three rounds or more in 300 ms.
	n := releases.n.Load()
	assert.GreaterOrEqual(t, n, int64(len(c.srv)), "a waiter that gave up leaves the line")
	assert.LessOrEqual(t, n, int64(2*len(c.srv)), "a waiter that gave up: one leave per node")
	assert.Eventually(t, func() bool { return len(handTokens(t, c, "k", b)) == 0 }, 5*time.Second, time.Millisecond, "b left the line")
	require.NoError(t, la.Unlock(t.Context()))
}

// TestHandoffReadsLine: a waiter in line for a handoff whose timer fires
// reads the nodes instead of sending a round, while each holds the key for
// another with the waiter in line: a later round there would change only
// the waiter's token. Once the nodes free the key without a handoff (the
// holder's keys expired, say), the next read finds it, and a round takes
// the key.
func TestHandoffReadsLine(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	for _, prefix := range []string{"", "app:"} {
		t.Run("prefix="+prefix, func(t *testing.T) {
			a := c.client(t, &Options{KeyPrefix: prefix})
			var reads atomic.Int64
			rounds := &cmdCounter{match: func(cmd redis.Cmder) bool {
				if cmd.Name() == "zscore" {
					reads.Add(1)
				}
				return isScript(scripts.Acquire)(cmd)
			}}
			b := c.hookedClient(t, rounds, &Options{KeyPrefix: prefix, MinRetryDelay: 10 * time.Millisecond, MaxRetryDelay: 10 * time.Millisecond, NodeTimeout: time.Second})
			primeHandChannel(t, b)
			la, err := a.Lock(t.Context(), "k", time.Minute)
			require.NoError(t, err)
			settle(a)

			lc, ec := lockLater(b, "k", 10*time.Second)
			require.Eventually(t, func() bool {
				for i := range c.srv {
					m, err := c.srv[i].ZMembers(prefix + lineKey("k"))
					if err != nil || !slices.ContainsFunc(m, func(e string) bool { return strings.HasSuffix(e, "|"+b.handChannel()) }) {
						return false
					}
				}
				return true
			}, 5*time.Second, time.Millisecond, "b is in line on every node")
			sent := rounds.n.Load()
			// The time for a few reads: 10, 20, 40, 80 and 160 ms apart.
			// (Or the rounds that would have been sent instead.)
			n := int64(len(c.srv))
			require.Eventually(t, func() bool { return reads.Load() >= 4*n || rounds.n.Load() >= sent+2*n }, 5*time.Second, time.Millisecond, "b reads the nodes")
			assert.Equal(t, sent, rounds.n.Load(), "rounds sent while b's line was whole")

			// a's keys go without a release, as an expiry would take them:
			// no node hands them off. b's next read finds the key free.
			for i := range c.srv {
				c.srv[i].Del(prefix + "k")
			}
			var lb *Lock
			select {
			case lb = <-lc:
			case <-time.After(5 * time.Second):
				t.Fatal("b did not get the freed key within 5 s")
			}
			require.NoError(t, <-ec)
			assert.False(t, strings.HasPrefix(lb.Token(), protocol.HandPrefix), "b took the key with a round")
			assert.Greater(t, rounds.n.Load(), sent, "b sent a round")
			require.NoError(t, lb.Unlock(t.Context()))
			_ = la // its keys are gone; its Unlock would find none
		})
	}
}

// TestHandoffDropsForgotten: a node that announced a handoff to a round of
// a waiter's, which the waiter then forgot without a later round taking
// the key over there, does not keep the key for that round until its TTL:
// the waiter releases it when it forgets the round. Node 2 here hands the
// key off to b's first round (as a release that reached only node 2 would);
// b's round that would take it over is not sent to node 2 and fails.
func TestHandoffDropsForgotten(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	a := c.client(t, nil)
	b := c.client(t, &Options{MinRetryDelay: 10 * time.Millisecond, MaxRetryDelay: 10 * time.Millisecond})
	primeHandChannel(t, b)
	la, err := a.Lock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	settle(a)

	lc, ec := lockLater(b, "k", 10*time.Second)
	first := waitHandInLine(t, c, "k", b)
	waitHandChannel(t, c, b, "k")

	// b's acquires are not sent to node 2 from now on.
	c.hooks[2].selectCmds(func(cmd redis.Cmder) bool {
		return isScript(scripts.Acquire)(cmd) && strings.Contains(fmt.Sprint(cmd.Args()), b.handChannel())
	})
	c.hooks[2].set(nil, errors.New("not sent"))
	hand := protocol.HandPrefix + first
	require.NoError(t, c.srv[2].rdb.Set(t.Context(), "k", protocol.WaitedPrefix+hand, time.Minute).Err())
	_, err = c.srv[2].ZRem(lineKey("k"), first+"|"+first+"|10000|"+b.handChannel())
	require.NoError(t, err)
	require.Equal(t, 1, c.srv[2].Publish(b.handChannel(), strconv.Itoa(len(hand))+":"+hand+"k"), "b hears the handoff")

	// b's next round (after a grace) fails: node 2 is not reached, and a
	// holds the others. b forgets its first round, and releases node 2.
	require.Eventually(t, func() bool {
		v, _ := c.srv[2].Get("k")
		tok, _ := protocol.Holding(v)
		return tok != hand
	}, 5*time.Second, time.Millisecond, "node 2 no longer holds the key for b's first round")
	c.hooks[2].set(nil, nil)
	require.NoError(t, la.Unlock(t.Context()))
	lb := <-lc
	require.NoError(t, <-ec)
	require.NoError(t, lb.Unlock(t.Context()))
}

// TestHandoffHeardDuringRound: a node hands the key off to a waiter's
// round while that round is still out, short of a quorum, and no node
// tells anything after it. The announcement came while no sleep listened.
// The waiter's sleep must still give the handoff its grace and then take
// the key with a round, not wait for its retry timer (a minute here). The
// negative control is the sleep without the ledger's check: the Lock then
// waits for the timer.
func TestHandoffHeardDuringRound(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	c.tune = func(tu *tunables) {
		tu.graceFloor, tu.graceCap, tu.yieldWindow = 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
	}
	_, b := handoffPair(t, c)
	ctx := t.Context()
	for i := range c.srv {
		require.NoError(t, c.srv[i].rdb.Set(ctx, "k", "other", time.Minute).Err())
	}
	// b's rounds that join wait at nodes 1 and 2 until the gate opens.
	gate := make(chan struct{})
	for _, i := range []int{1, 2} {
		c.hooks[i].selectCmds(func(cmd redis.Cmder) bool {
			return isScript(scripts.Acquire)(cmd) && strings.Contains(fmt.Sprint(cmd.Args()), b.handChannel())
		})
		c.hooks[i].set(func() { <-gate }, nil)
	}
	lc, ec := lockLater(b, "k", 10*time.Second)
	var entry string
	require.Eventually(t, func() bool {
		es := entries(t, c, 0, "k")
		if len(es) == 1 {
			entry = es[0]
		}
		return entry != ""
	}, 5*time.Second, time.Millisecond, "b's round joined the line on node 0")
	first := strings.SplitN(entry, "|", 2)[0]

	// Node 0 hands the key off to b's round, which is still out.
	hand := protocol.HandPrefix + first
	require.NoError(t, c.srv[0].rdb.Set(ctx, "k", protocol.WaitedPrefix+hand, time.Minute).Err())
	_, err := c.srv[0].ZRem(lineKey("k"), entry)
	require.NoError(t, err)
	require.Equal(t, 1, c.srv[0].Publish(b.handChannel(), strconv.Itoa(len(hand))+":"+hand+"k"))
	heardHandoff(t, b, first, 0)

	// Nodes 1 and 2 refuse the round, then free the key without a word.
	for _, i := range []int{1, 2} {
		require.NoError(t, c.srv[i].rdb.Set(ctx, "k", "other", 100*time.Millisecond).Err())
	}
	close(gate)
	lockedBeforeTimer(t, c, lc, ec, "the handoff heard during its round got no grace")
	for _, i := range []int{1, 2} {
		c.hooks[i].set(nil, nil)
	}
}

// TestHandoffCleanUpNames: a failed round's clean-up announces a key that
// waiters are in line for, naming the first, without handing it off. Here
// another client's round takes node 0's key (marked: b is in line) and
// fails, the other nodes having freed the key without a word. b, whose
// retries wait a minute, must hear the clean-up and take the key. The
// negative control is a clean-up that announces nothing: b then waits for
// its timer.
func TestHandoffCleanUpNames(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	_, b := handoffPair(t, c)
	d := c.client(t, nil)
	ctx := t.Context()
	for i := range c.srv {
		require.NoError(t, c.srv[i].rdb.Set(ctx, "k", "other", time.Minute).Err())
	}
	lc, ec := lockLater(b, "k", 10*time.Second)
	waitHandInLine(t, c, "k", b)
	waitHandChannel(t, c, b, "k")

	// Node 0 keeps only a tombstone, marked; nodes 1 and 2 let the key go
	// silently, and d's acquires fail there.
	require.NoError(t, c.srv[0].rdb.Set(ctx, "k", protocol.WaitedPrefix+protocol.TombstonePrefix+"x", time.Minute).Err())
	for _, i := range []int{1, 2} {
		require.NoError(t, c.srv[i].rdb.Del(ctx, "k").Err())
		c.hooks[i].selectCmds(func(cmd redis.Cmder) bool {
			return !strings.Contains(fmt.Sprint(cmd.Args()), b.handChannel()) && (isScript(scripts.Acquire)(cmd) || cmd.Name() == "set")
		})
		c.hooks[i].set(nil, errors.New("unreachable"))
	}
	_, err := d.TryLock(ctx, "k", time.Minute)
	require.ErrorIs(t, err, ErrNotObtained)
	for _, i := range []int{1, 2} {
		c.hooks[i].set(nil, nil)
	}
	lockedBeforeTimer(t, c, lc, ec, "d's clean-up did not name it")
}

// lockedBeforeTimer waits for the Lock of lockLater on "k", whose retry
// timer is a minute, to obtain the key on every node of c well before
// that, and unlocks it; else it fails, saying why.
func lockedBeforeTimer(t *testing.T, c *cluster, lc <-chan *Lock, ec <-chan error, why string) {
	t.Helper()
	select {
	case l := <-lc:
		require.NoError(t, <-ec)
		c.waitHolders(t, "k", l.token, len(c.srv)) // the round returned at its quorum
		require.NoError(t, l.Unlock(t.Context()))
	case <-time.After(5 * time.Second):
		t.Fatalf("the Lock waits for its retry timer: %s", why)
	}
}

// TestHandValueReleaseNoTombstone: the release of a lock that a handoff
// gave (a hand value) leaves no tombstone on a node where the key is free
// and no top-up acquire of the hand value is in doubt: there, node 0 lost
// the holder's key, so it did not hand the key off, and the waiter's round
// had joined its line, so no top-up went there.
// A plain token's release leaves its tombstone on a free key all the same
// (the control), and so did a hand value's before: on a hot key those
// piled up to the limit, and every grant and handoff read them all.
func TestHandValueReleaseNoTombstone(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 5)
	c.tune = func(tn *tunables) { tn.yieldWindow = time.Second }
	a, b := handoffPair(t, c)
	for try := range 3 {
		key := fmt.Sprintf("k%d", try)
		listenedLately(b, key) // b's first round is its waiter's, which joins the line
		la, err := a.Lock(t.Context(), key, time.Minute)
		require.NoError(t, err)
		settle(a)
		lc, ec := lockLater(b, key, 10*time.Second)
		waitHandInLine(t, c, key, b)
		waitHandChannel(t, c, b, key)
		c.srv[0].Del(key) // node 0 will not hand the key off to b
		require.NoError(t, la.Unlock(t.Context()))
		lb := <-lc
		require.NoError(t, <-ec)
		settle(a)
		settle(b)
		if !strings.HasPrefix(lb.Token(), protocol.HandPrefix) {
			t.Logf("attempt %d: b took %s with a round", try, key)
			require.NoError(t, lb.Unlock(t.Context()))
			continue
		}
		require.False(t, held(c.srv[0], key), "node 0 did not hand the key off")
		require.NoError(t, lb.Unlock(t.Context()))
		settle(b)
		for i, m := range c.srv {
			v, _ := m.Get(key)
			assert.NotContains(t, v, protocol.TombstonePrefix+protocol.HandPrefix, "node %d: the hand value's release left a tombstone", i)
			assert.False(t, held(m, key), "node %d: %s left holding %q", i, key, v)
		}
		// The control: a plain token's release on a free key.
		pa, err := a.Lock(t.Context(), key, time.Minute)
		require.NoError(t, err)
		settle(a)
		c.srv[0].Del(key)
		require.NoError(t, pa.Unlock(t.Context()))
		settle(a)
		v, _ := c.srv[0].Get(key)
		assert.Equal(t, protocol.TombstonePrefix+pa.Token(), v, "a plain token's release leaves its tombstone")
		return
	}
	t.Fatal("no attempt handed the key off on the nodes")
}
