package test

import (
	"context"
	"fmt"
	"os"
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
	"github.com/redquorum/redquorum/redlock"
)

// five starts five native redis-server masters and returns their addresses
// and a plain client on each for looking at them. Without redis-server it
// skips, or fails under CI=true.
func five(t *testing.T) ([]string, []*redis.Client) {
	t.Helper()
	redisproc.Require(t)
	s, err := redisproc.Start(t.Context(), 5)
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	var direct []*redis.Client
	for _, a := range s.Addrs {
		d := redis.NewClient(&redis.Options{Addr: a, Protocol: 2})
		t.Cleanup(func() { _ = d.Close() })
		direct = append(direct, d)
	}
	return s.Addrs, direct
}

// open returns a Client made by redlock.Open on addrs, closed at the end of
// the test.
//
// NodeTimeout defaults to 1s, as in nodes.client: a test here checks what a
// round decides, not how fast a loaded machine answers (three of five nodes
// once took over 50 ms to answer one unlock under the full make test).
func open(t *testing.T, addrs []string, opts *redlock.Options) *redlock.Client {
	t.Helper()
	if opts == nil {
		opts = &redlock.Options{}
	}
	if opts.NodeTimeout == 0 {
		opts.NodeTimeout = time.Second
	}
	c, err := redlock.Open(addrs, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// waitHeldEverywhere waits until every node holds key (as stored) for token.
func waitHeldEverywhere(t *testing.T, direct []*redis.Client, key, token string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, d := range direct {
			if d.Get(context.Background(), key).Val() != token {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "%s held on every node", key)
}

// TestOwnerAndHolder: a lock carries its Client's owner; another Client
// sees the holder a quorum agrees on, and how long it holds; a key that a
// quorum of nodes have free has the zero Holder.
func TestOwnerAndHolder(t *testing.T) {
	leakcheck.Check(t)
	addrs, direct := five(t)
	billing := open(t, addrs, &redlock.Options{Owner: "billing-7"})
	other := open(t, addrs, nil)
	ctx := t.Context()

	l, err := billing.Lock(ctx, "order:1", 10*time.Second)
	require.NoError(t, err)
	waitHeldEverywhere(t, direct, "order:1", l.Token())
	h, err := other.Holder(ctx, "order:1")
	require.NoError(t, err)
	assert.Equal(t, "billing-7", h.Owner)
	assert.Equal(t, 5, h.Nodes)
	assert.Greater(t, h.TTL, 9*time.Second)
	assert.LessOrEqual(t, h.TTL, 10*time.Second)

	// A refused attempt marks the key as waited for on every node; the
	// holder, its TTL and the lock's own TTL read the same.
	_, err = other.TryLock(ctx, "order:1", time.Second)
	require.ErrorIs(t, err, redlock.ErrTaken)
	require.Eventually(t, func() bool {
		marked := 0
		for _, d := range direct {
			if v, _ := d.Get(ctx, "order:1").Result(); v == protocol.WaitedPrefix+l.Token() {
				marked++
			}
		}
		return marked >= 3 // a decided round is not sent to a busy node
	}, 5*time.Second, time.Millisecond, "a quorum of nodes marked")
	h, err = other.Holder(ctx, "order:1")
	require.NoError(t, err)
	assert.Equal(t, "billing-7", h.Owner)
	assert.Equal(t, 5, h.Nodes)
	assert.Greater(t, h.TTL, 8*time.Second)
	ttl, err := l.TTL(ctx)
	require.NoError(t, err)
	assert.Greater(t, ttl, 8*time.Second)

	// The default owner is <hostname>:<pid>.
	l2, err := other.Lock(ctx, "order:2", 10*time.Second)
	require.NoError(t, err)
	host, _ := os.Hostname()
	h2, err := billing.Holder(ctx, "order:2")
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("%s:%d", host, os.Getpid()), h2.Owner)
	require.NoError(t, l2.Unlock(ctx))

	// Two nodes lose the key: the quorum of three still holds it.
	for _, d := range direct[:2] {
		require.NoError(t, d.Del(ctx, "order:1").Err())
	}
	h, err = other.Holder(ctx, "order:1")
	require.NoError(t, err)
	assert.Equal(t, 3, h.Nodes)
	// A third: a quorum of nodes agree that the key is free.
	require.NoError(t, direct[2].Del(ctx, "order:1").Err())
	h, err = other.Holder(ctx, "order:1")
	require.NoError(t, err)
	assert.Equal(t, redlock.Holder{}, h)

	require.ErrorIs(t, l.Unlock(ctx), redlock.ErrNotHeld, "two nodes still held it: not a quorum")
	h, err = other.Holder(ctx, "order:1")
	require.NoError(t, err)
	assert.Equal(t, redlock.Holder{}, h)
}

// TestLockTTL: Lock.TTL says how long a quorum still holds the lock, at
// most until Until; it follows an Extend, and it reports ErrNotHeld once a
// quorum lost the token, after Unlock, and after expiry.
func TestLockTTL(t *testing.T) {
	leakcheck.Check(t)
	addrs, direct := five(t)
	c := open(t, addrs, nil)
	ctx := t.Context()
	l, err := c.Lock(ctx, "ttl", 2*time.Second)
	require.NoError(t, err)
	waitHeldEverywhere(t, direct, "ttl", l.Token())
	left := time.Until(l.Until())
	ttl, err := l.TTL(ctx)
	require.NoError(t, err)
	assert.Greater(t, ttl, time.Second)
	assert.LessOrEqual(t, ttl, left, "never beyond Until")

	require.NoError(t, l.Extend(ctx, 20*time.Second))
	ttl, err = l.TTL(ctx)
	require.NoError(t, err)
	assert.Greater(t, ttl, 19*time.Second, "after Extend")

	for _, d := range direct[:3] {
		require.NoError(t, d.Set(ctx, "ttl", "someone else", time.Minute).Err())
	}
	_, err = l.TTL(ctx)
	require.ErrorIs(t, err, redlock.ErrNotHeld, "a quorum no longer holds the token")
	for _, d := range direct {
		require.NoError(t, d.Del(ctx, "ttl").Err())
	}

	short, err := c.Lock(ctx, "short", 50*time.Millisecond)
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	_, err = short.TTL(ctx)
	require.ErrorIs(t, err, redlock.ErrNotHeld)
	assert.Contains(t, err.Error(), "ago")
	assert.NotContains(t, err.Error(), "m=+", "no monotonic clock reading")
}

// TestUnlockWithDoneContext: a deferred Unlock with a request context that
// has already ended releases the lock on every node and returns nil; a
// second Unlock reports ErrNotHeld.
func TestUnlockWithDoneContext(t *testing.T) {
	leakcheck.Check(t)
	addrs, direct := five(t)
	c := open(t, addrs, nil)
	ctx, cancel := context.WithCancel(t.Context())
	l, err := c.Lock(ctx, "req", 10*time.Second)
	require.NoError(t, err)
	waitHeldEverywhere(t, direct, "req", l.Token())
	cancel()
	require.NoError(t, l.Unlock(ctx), "released although ctx is done")
	require.Eventually(t, func() bool {
		for _, d := range direct {
			if d.Exists(context.Background(), "req").Val() != 0 {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "the key is gone from every node")
	err = l.Unlock(t.Context())
	require.ErrorIs(t, err, redlock.ErrNotHeld)
	assert.Equal(t, `redlock: unlock "req": not held: already unlocked`, err.Error())
}

// TestErrorText: each failure reads as one short line that names the
// operation, the key, the votes and the main cause, and leaves the
// per-node story to errors.As and %+v.
func TestErrorText(t *testing.T) {
	leakcheck.Check(t)
	addrs, direct := five(t)
	holder := open(t, addrs, nil)
	c := open(t, addrs, &redlock.Options{MaxWait: 200 * time.Millisecond})
	ctx := t.Context()
	l, err := holder.Lock(ctx, "busy", time.Minute)
	require.NoError(t, err)
	waitHeldEverywhere(t, direct, "busy", l.Token())

	oneLine := func(t *testing.T, err error) string {
		t.Helper()
		require.Error(t, err)
		msg := err.Error()
		assert.NotContains(t, msg, "\n")
		assert.LessOrEqual(t, len(msg), 200, msg)
		assert.NotContains(t, msg, "no answer yet", "healthy nodes are not listed as failures")
		return msg
	}
	_, err = c.TryLock(ctx, "busy", time.Second)
	assert.Regexp(t, `^redlock: lock "busy": not obtained \(0 of 5 nodes, 3 needed\): held by another owner on [345] nodes$`, oneLine(t, err))
	var e *redlock.Error
	require.ErrorAs(t, err, &e)
	assert.Len(t, e.Nodes, 5)
	assert.Contains(t, fmt.Sprintf("%+v", err), "\n\t"+addrs[0]+": ", "%+v lists the nodes")

	_, err = c.Lock(ctx, "busy", time.Second)
	assert.Contains(t, oneLine(t, err), "gave up after Options.MaxWait 200ms")

	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(30*time.Millisecond, cancel)
	_, err = c.Lock(cctx, "busy", time.Second)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Regexp(t, `^redlock: lock "busy": not obtained \(0 of 5 nodes, 3 needed\): held by another owner on [345] nodes; context canceled$`, oneLine(t, err))

	dctx, dcancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer dcancel()
	_, err = c.Lock(dctx, "busy", time.Second)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Regexp(t, `: held by another owner on [345] nodes; context deadline exceeded$`, oneLine(t, err))

	long := strings.Repeat("k", 1<<20)
	_, err = c.TryLock(ctx, long, time.Second)
	assert.Equal(t, "redlock: keys[0] is 1048576 bytes long, above MaxKeyLen (1024)", oneLine(t, err))
	for _, d := range direct {
		assert.Equal(t, []string{"busy"}, nonState(d.Keys(ctx, "*").Val()), "nothing stored for the long key")
	}

	// A Do whose lock is lost says so once, on one line.
	err = c.Do(ctx, "lost", time.Second, func(ctx context.Context) error {
		for _, d := range direct {
			require.NoError(t, d.Set(context.Background(), "lost", "thief", time.Minute).Err())
		}
		<-ctx.Done()
		return context.Cause(ctx)
	})
	require.ErrorIs(t, err, redlock.ErrLockLost)
	msg := oneLine(t, err)
	assert.Equal(t, 1, strings.Count(msg, "lock lost"), msg)
	require.NoError(t, l.Unlock(ctx))
}

// TestGuardedErrorText: a node in its restart guard says how long it has
// left, and so does a lock refused by a quorum of such nodes.
func TestGuardedErrorText(t *testing.T) {
	leakcheck.Check(t)
	addrs, direct := five(t)
	c := open(t, addrs, &redlock.Options{RestartGuard: 30 * time.Second})
	ctx := t.Context()
	l, err := c.Lock(ctx, "warm", time.Second) // a new deployment: established at once
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	for _, d := range direct[:3] {
		require.NoError(t, d.FlushAll(ctx).Err())
	}
	_, err = c.TryLock(ctx, "job", time.Second)
	require.ErrorIs(t, err, redlock.ErrGuarded)
	assert.Regexp(t, `^redlock: lock "job": not obtained \(\d of 5 nodes, 3 needed\): restart guard on 3 nodes, (29\.\d+|30)s left$`, err.Error())
	var e *redlock.Error
	require.ErrorAs(t, err, &e)
	for _, n := range e.Nodes[:3] {
		if n.Err != nil {
			assert.Regexp(t, `^redlock: node in its restart guard, .*s left$`, n.Err.Error())
		}
	}
}

// nonState returns keys without the nodes' state keys and the queues of
// waiters (which expire by themselves).
func nonState(keys []string) []string {
	var out []string
	for _, k := range keys {
		if !protocol.Reserved(k) {
			out = append(out, k)
		}
	}
	return out
}

// TestOpenOwnsNodeClients: Close closes the node clients that Open made.
func TestOpenOwnsNodeClients(t *testing.T) {
	leakcheck.Check(t)
	addrs, direct := five(t)
	c, err := redlock.Open(addrs, nil)
	require.NoError(t, err)
	l, err := c.Lock(t.Context(), "k", time.Second)
	require.NoError(t, err)
	before := direct[0].ClientList(t.Context()).Val()
	require.NoError(t, l.Unlock(t.Context()))
	require.NoError(t, c.Close())
	require.Eventually(t, func() bool {
		return strings.Count(direct[0].ClientList(t.Context()).Val(), "\n") < strings.Count(before, "\n")
	}, 5*time.Second, 10*time.Millisecond, "the Client's connections to node 0 are closed")
	_, err = c.Lock(t.Context(), "k", time.Second)
	assert.ErrorIs(t, err, redlock.ErrClosed)
	_, err = redlock.Open(nil, nil)
	assert.EqualError(t, err, "redlock: no addresses")
	assert.NoError(t, c.Close(), "Close twice")
}

// TestNewDeploymentSlowNode: a brand-new deployment whose fifth node
// answers later than the node timeout (NodeTimeout 50 ms) locks at once:
// the slow node's late answer, guarded by the same round, counts towards
// recognising the new deployment. At 300 ms each way the slow node needs
// 1.2 s for its first answer (the connection check, then the acquire),
// longer than any fixed wait shorter than the new-deployment window.
func TestNewDeploymentSlowNode(t *testing.T) {
	for _, delay := range []time.Duration{150 * time.Millisecond, 300 * time.Millisecond} {
		t.Run(delay.String(), func(t *testing.T) { newDeploymentSlowNode(t, delay) })
	}
}

func newDeploymentSlowNode(t *testing.T, delay time.Duration) {
	leakcheck.Check(t)
	addrs, direct := five(t)
	p, err := faultproxy.NewProxy(addrs[4])
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	p.SetLatency(delay, delay)
	nodes := redlock.NewNodes(append(addrs[:4:4], p.Addr())...)
	t.Cleanup(func() {
		for _, n := range nodes {
			_ = n.Close()
		}
	})
	c, err := redlock.New(nodes, nil) // NodeTimeout 50 ms, RestartGuard 1 min
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	start := time.Now()
	l, err := c.Lock(ctx, "job", 5*time.Second)
	require.NoError(t, err, "a new deployment with a slow node locks before its guard has run out")
	assert.Less(t, time.Since(start), 10*time.Second)
	require.NoError(t, l.Unlock(ctx))
	for i, d := range direct {
		assert.Eventually(t, func() bool { return d.HGet(ctx, "redquorum:node", "g").Val() == "0" }, 5*time.Second, 10*time.Millisecond, "node %d established", i)
	}
}
