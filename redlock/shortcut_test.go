package redlock

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
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

// TestNewDeploymentRestartDuringEstablish: the double hold that the model
// finds in the new-deployment shortcut without its marking round
// (docs/SAFETY.md, "The new-deployment shortcut", run ctl-nomark) cannot
// happen on real servers. B, another Client whose rounds the test sends by
// hand, finds a new deployment, marks every node and sends its
// establishing round; node 0 grants it and restarts empty. A, a new
// Client, then finds every node guarded: node 0 with a new state, nodes 1
// and 2 because B's requests have not reached them. Without the mark A
// would establish nodes 0 and 1 while B's request reaches node 2, and both
// would hold; with it, nodes 1 and 2 carry B's mark, which is not that of
// the ids A sees, so A takes no shortcut and sends nothing but its round.
func TestNewDeploymentRestartDuringEstablish(t *testing.T) {
	leakcheck.Check(t)
	s := redisproc.StartT(t, 3)
	ctx := t.Context()
	admin := make([]*redis.Client, len(s.Addrs))
	for i, addr := range s.Addrs {
		admin[i] = redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
		t.Cleanup(func() { _ = admin[i].Close() })
	}
	const ttl = 10 * time.Second
	p := protocol.New(DefaultRestartGuard, false, protocol.Kernel, "")
	keys := []string{"k", protocol.StateKey}
	acquire := func(i int, token string, sc protocol.Shortcut) (protocol.AcquireReply, error) {
		v, err := p.Run(ctx, admin[i], p.AcquireCmd(protocol.Acquire{Keys: keys, Token: token, TTL: ttl, Shortcut: sc}))
		if err != nil {
			return protocol.AcquireReply{}, err
		}
		return protocol.DecodeAcquire(v)
	}

	b1, bm, b2 := protocol.NewToken("b"), protocol.NewToken("b"), protocol.NewToken("b")
	for i := range admin {
		r, err := acquire(i, b1, protocol.Shortcut{})
		require.NoError(t, err)
		require.Equal(t, protocol.Guarded, r.Kind, "node %d of a new deployment", i)
		require.Equal(t, b1, r.StateID)
		require.Empty(t, r.Mark)
	}
	mark := protocol.StateMark([]string{b1, b1, b1})
	for i := range admin { // B's marking round
		r, err := acquire(i, bm, protocol.Shortcut{ID: b1, Mark: mark})
		require.NoError(t, err)
		require.Equal(t, protocol.Guarded, r.Kind, "node %d grants nothing to the mark", i)
		require.Equal(t, mark, r.Mark, "node %d marked", i)
	}
	est := protocol.Shortcut{ID: b1, Mark: mark, Establish: true}
	r, err := acquire(0, b2, est) // B's establishing round reaches node 0
	require.NoError(t, err)
	require.Equal(t, protocol.Granted, r.Kind)
	require.NoError(t, admin[0].FlushAll(ctx).Err()) // node 0 restarts empty

	// A sees every node guarded; it must not take the shortcut.
	hook := &faultHook{}
	var sent atomic.Int32 // A's shortcut requests with B's mark
	hook.selectCmds(func(cmd redis.Cmder) bool {
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && len(s) > 33 && (s[0] == 'm' || s[0] == 'e') && s[1:33] == mark {
				return true
			}
		}
		return false
	})
	hook.set(func() { sent.Add(1) }, nil)
	nodes := NewNodes(s.Addrs...)
	nodes[1].AddHook(hook)
	nodes[2].AddHook(hook)
	a, err := New(nodes, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	l, err := a.TryLock(ctx, "k", ttl)
	require.ErrorIs(t, err, ErrGuarded, "A obtained %v", l)
	assert.Zero(t, sent.Load(), "A sent a shortcut request with B's mark")

	// B's establishing request reaches node 2 after A's round: B holds on
	// nodes 0 (lost in the restart) and 2, and A still obtains nothing.
	onTwo, err := acquire(2, b2, est)
	require.NoError(t, err)
	require.Equal(t, protocol.Granted, onTwo.Kind, "B's establishing acquire on node 2")
	_, err = a.TryLock(ctx, "k", ttl)
	require.Error(t, err)
	for i := range admin {
		v, _ := admin[i].Get(ctx, "k").Result()
		tok, _ := protocol.Holding(v)
		assert.True(t, tok == "" || tok == b2, "node %d holds %q, not B's %q", i, tok, b2)
	}
	// Node 0's new state is not marked: only a Client that sees all three
	// nodes with new states could take the shortcut again.
	r, err = acquire(1, protocol.NewToken("c"), protocol.Shortcut{})
	require.NoError(t, err)
	assert.Equal(t, mark, r.Mark, "node 1 keeps B's mark")
}

// TestNewDeploymentEvents: Clients that start together on a brand-new
// deployment report each node they establish as Established, and no node as
// GuardEntered; a node that restarts empty afterwards is reported guarded.
func TestNewDeploymentEvents(t *testing.T) {
	leakcheck.Check(t)
	s := redisproc.StartT(t, 5)
	const clients = 4
	rec := &recorder{}
	cls := make([]*Client, clients)
	for i := range cls {
		nodes := NewNodes(s.Addrs...)
		t.Cleanup(func() {
			for _, n := range nodes {
				_ = n.Close()
			}
		})
		c, err := New(nodes, &Options{Observer: rec.observer(), RestartGuard: 30 * time.Second, NodeTimeout: time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		cls[i] = c
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	errs := make([]error, clients)
	var wg sync.WaitGroup
	for i, c := range cls {
		wg.Go(func() {
			l, err := c.Lock(ctx, "k"+strconv.Itoa(i), 5*time.Second)
			if err == nil {
				err = l.Unlock(ctx)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "client %d", i)
	}
	count := func(change NodeChange) (n int, nodes map[string]bool) {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		nodes = map[string]bool{}
		for _, e := range rec.nodes {
			if e.Change == change {
				n++
				nodes[e.Node] = true
			}
		}
		return n, nodes
	}
	n, _ := count(GuardEntered)
	assert.Zero(t, n, "a new deployment is no guard: %q", rec.nodeChanges())
	assert.Eventually(t, func() bool { _, est := count(Established); return len(est) == len(s.Addrs) }, 5*time.Second, time.Millisecond,
		"every node established, the last ones by establishing requests answered after the locks: %q", rec.nodeChanges())
	n, _ = count(Established)
	assert.LessOrEqual(t, n, clients*len(s.Addrs), "once per node and Client")

	require.NoError(t, s.Restart(ctx, 2)) // node 2 loses its data: a real guard
	require.Eventually(t, func() bool {
		l, err := cls[0].TryLock(ctx, "after", 5*time.Second)
		if err == nil {
			_ = l.Unlock(ctx)
		}
		n, guarded := count(GuardEntered)
		return n == 1 && guarded[s.Addrs[2]]
	}, 10*time.Second, 10*time.Millisecond, "node 2 reported guarded: %q", rec.nodeChanges())
}

// roundTrips counts the requests a node client answered (a pipeline is
// one).
type roundTrips struct{ n atomic.Int32 }

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		defer h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		defer h.n.Add(1)
		return next(ctx, cmds)
	}
}

// TestNewDeploymentSlowNodeRoundTrips: the first Lock of a brand-new
// deployment whose fifth node is slow waits for four of its round trips:
// HELLO and the connection check on its first connection, then the
// shortcut's observing and marking rounds, each with its script's source
// at first use where it could find the script not loaded. The
// establishing round decides at the quorum, without the slow node, whose
// request ends its guard when it arrives. No NOSCRIPT answer costs a round
// trip of its own.
func TestNewDeploymentSlowNodeRoundTrips(t *testing.T) {
	leakcheck.Check(t)
	s := redisproc.StartT(t, 5)
	p, err := faultproxy.NewProxy(s.Addrs[4])
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	const delay = 150 * time.Millisecond // each way
	p.SetLatency(delay, delay)
	nodes := NewNodes(append(s.Addrs[:4:4], p.Addr())...)
	t.Cleanup(func() {
		for _, n := range nodes {
			_ = n.Close()
		}
	})
	slow := &roundTrips{}
	nodes[4].AddHook(slow)
	c, err := New(nodes, &Options{NodeTimeout: time.Second}) // the first rounds wait up to 5 s anyway
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	start := time.Now()
	l, err := c.Lock(t.Context(), "job", 5*time.Second)
	took := time.Since(start)
	require.NoError(t, err)
	answered := slow.n.Load()
	t.Logf("first Lock: %v, %d answers from the slow node (round trip %v)", took, answered, 2*delay)
	assert.Equal(t, int32(4), answered, "answers from the slow node before the first Lock returned")
	require.NoError(t, l.Unlock(t.Context()))
	direct := redis.NewClient(&redis.Options{Addr: s.Addrs[4]})
	t.Cleanup(func() { _ = direct.Close() })
	assert.Eventually(t, func() bool {
		return direct.HGet(t.Context(), protocol.StateKey, "g").Val() == "0"
	}, 5*time.Second, 10*time.Millisecond, "the slow node's establishing request ended its guard")
}
