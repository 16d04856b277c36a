package redlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/clock"
)

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	begins []Op
	ends   []Event
	dos    []DoEvent
	nodes  []NodeEvent
	// ctxOK counts the End events whose context carried the value that
	// Begin put in it.
	ctxOK int
}

type beginKey struct{}

func (r *recorder) observer() *Observer {
	return &Observer{
		Begin: func(ctx context.Context, op Op, keys []string) context.Context {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.begins = append(r.begins, op)
			return context.WithValue(ctx, beginKey{}, op)
		},
		End: func(ctx context.Context, e Event) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.ends = append(r.ends, e)
			if ctx.Value(beginKey{}) == e.Op {
				r.ctxOK++
			}
		},
		Do: func(_ context.Context, e DoEvent) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.dos = append(r.dos, e)
		},
		Node: func(_ context.Context, e NodeEvent) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.nodes = append(r.nodes, e)
		},
	}
}

// last returns the last End event, of op.
func (r *recorder) last(t *testing.T, op Op) Event {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.NotEmpty(t, r.ends)
	e := r.ends[len(r.ends)-1]
	require.Equal(t, op, e.Op)
	return e
}

func (r *recorder) nodeChanges() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.nodes {
		out = append(out, e.Node+" "+string(e.Change))
	}
	return out
}

func votes(r Round) map[VoteOutcome]int {
	m := map[VoteOutcome]int{}
	for _, v := range r.Nodes {
		m[v.Outcome]++
	}
	return m
}

func TestObserverLockExtendUnlock(t *testing.T) {
	c := newCluster(t, 5)
	rec := &recorder{}
	cl := c.client(t, &Options{Observer: rec.observer()})
	ctx := t.Context()

	l, err := cl.TryLock(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	e := rec.last(t, OpTryLock)
	assert.Equal(t, Obtained, e.Outcome)
	assert.NoError(t, e.Err)
	assert.Equal(t, []string{"k"}, e.Keys)
	require.Len(t, e.Rounds, 1)
	r := e.Rounds[0]
	require.Len(t, r.Nodes, 5)
	assert.GreaterOrEqual(t, r.Granted, 3)
	assert.Equal(t, r.Granted, votes(r)[VoteGranted])
	for i, v := range r.Nodes {
		assert.Equal(t, c.srv[i].Addr(), v.Node)
		if v.Outcome == VoteGranted {
			assert.Positive(t, v.Latency, "node %d", i)
		}
	}
	assert.GreaterOrEqual(t, e.Duration, r.Duration)
	assert.Zero(t, e.Waited, "TryLock does not wait")

	require.NoError(t, l.Extend(ctx, 10*time.Second))
	e = rec.last(t, OpExtend)
	assert.Equal(t, Extended, e.Outcome)
	require.Len(t, e.Rounds, 1)
	assert.GreaterOrEqual(t, e.Rounds[0].Granted, 3)

	time.Sleep(5 * time.Millisecond)
	require.NoError(t, l.Unlock(ctx))
	e = rec.last(t, OpUnlock)
	assert.Equal(t, Released, e.Outcome)
	assert.True(t, e.Ended)
	assert.GreaterOrEqual(t, e.Held, 5*time.Millisecond)
	require.Len(t, e.Rounds, 1)
	assert.GreaterOrEqual(t, e.Rounds[0].Granted, 3)

	err = l.Unlock(ctx)
	require.ErrorIs(t, err, ErrNotHeld)
	e = rec.last(t, OpUnlock)
	assert.Equal(t, Lost, e.Outcome)
	assert.False(t, e.Ended, "a repeated Unlock does not end the lock again")
	assert.Empty(t, e.Rounds)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	assert.Equal(t, []Op{OpTryLock, OpExtend, OpUnlock, OpUnlock}, rec.begins)
	assert.Equal(t, 4, rec.ctxOK, "End gets the context that Begin returned")
	assert.Empty(t, rec.nodes, "healthy nodes do not change state")
}

func TestObserverOutcomes(t *testing.T) {
	c := newCluster(t, 3)
	rec := &recorder{}
	cl := c.client(t, &Options{Observer: rec.observer()})
	impatient := c.client(t, &Options{Observer: rec.observer(), MaxWait: 30 * time.Millisecond})
	other := c.client(t, nil)
	ctx := t.Context()
	held, err := other.Lock(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	defer held.Unlock(ctx)
	c.waitAll(t, "k") // the third node's grant may land after Lock returns

	_, err = cl.TryLock(ctx, "k", time.Second)
	require.ErrorIs(t, err, ErrTaken)
	e := rec.last(t, OpTryLock)
	assert.Equal(t, Taken, e.Outcome)
	assert.Equal(t, 3, votes(e.Rounds[0])[VoteTaken]+votes(e.Rounds[0])[VotePending])

	_, err = impatient.Lock(ctx, "k", time.Second) // MaxWait
	require.ErrorIs(t, err, ErrNotObtained)
	e = rec.last(t, OpLock)
	assert.Equal(t, TimedOut, e.Outcome)
	assert.GreaterOrEqual(t, len(e.Rounds), 2, "Lock retried")
	assert.Positive(t, e.Waited)
	assert.Less(t, e.Waited, e.Duration)

	dctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = cl.LockMany(dctx, []string{"k", "k2"}, time.Second)
	require.Error(t, err)
	assert.Equal(t, TimedOut, rec.last(t, OpLockMany).Outcome)

	cctx, cancel2 := context.WithCancel(ctx)
	time.AfterFunc(10*time.Millisecond, cancel2)
	_, err = cl.Lock(cctx, "k", time.Second)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, Cancelled, rec.last(t, OpLock).Outcome)

	_, err = cl.TryLockMany(ctx, []string{"a", "a"}, time.Second)
	require.Error(t, err)
	e = rec.last(t, OpTryLockMany)
	assert.Equal(t, Failed, e.Outcome)
	assert.Empty(t, e.Rounds, "bad arguments: no round")
}

func TestObserverNodeChanges(t *testing.T) {
	c := newCluster(t, 5)
	rec := &recorder{}
	cl := c.client(t, &Options{Observer: rec.observer(), NodeTimeout: 200 * time.Millisecond})
	ctx := t.Context()
	down := errors.New("dial tcp: connection refused")
	c.hooks[1].set(nil, down)
	// A round decides without its slowest nodes: lock until a change
	// shows up in a round that heard from the node.
	lockUntil := func(want string) {
		t.Helper()
		for range 100 {
			l, err := cl.TryLock(ctx, "k", time.Second)
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctx))
			settle(cl)
			if slices.Contains(rec.nodeChanges(), want) {
				return
			}
		}
		t.Fatalf("no %q in %q", want, rec.nodeChanges())
	}
	n1, n3 := c.srv[1].Addr(), c.srv[3].Addr()
	lockUntil(n1 + " unreachable")
	lockUntil(n1 + " unreachable") // more failures change nothing
	assert.Equal(t, []string{n1 + " unreachable"}, rec.nodeChanges(), "reported once")
	rec.mu.Lock()
	assert.ErrorIs(t, rec.nodes[0].Err, down)
	assert.Equal(t, 1, rec.nodes[0].Index)
	rec.mu.Unlock()

	c.hooks[1].set(nil, nil)
	c.restart(3) // node 3 loses its data: its guard begins
	lockUntil(n1 + " reachable")
	lockUntil(n3 + " guard_entered")
	assert.ElementsMatch(t, []string{n1 + " unreachable", n1 + " reachable", n3 + " guard_entered"}, rec.nodeChanges())

	c.passGuards(2*DefaultRestartGuard, 3) // its guard has run out
	lockUntil(n3 + " guard_left")
	assert.Len(t, rec.nodeChanges(), 4)
}

func TestObserverPanicDoesNotBreakRound(t *testing.T) {
	c := newCluster(t, 3)
	var logs logBuffer
	boom := func(context.Context, Event) { panic("boom") }
	cl := c.client(t, &Options{Logger: logs.logger(), Observer: &Observer{
		Begin: func(context.Context, Op, []string) context.Context { panic("boom") },
		End:   boom,
	}})
	for range 3 {
		l, err := cl.TryLock(t.Context(), "k", time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(t.Context()))
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "Observer hook panicked"), logs.String())
	assert.Contains(t, logs.String(), "level=WARN")
}

func TestObserverDo(t *testing.T) {
	c := newCluster(t, 3)
	rec := &recorder{}
	cl := c.client(t, &Options{Observer: rec.observer()})
	err := cl.Do(t.Context(), "job", 300*time.Millisecond, func(ctx context.Context) error {
		time.Sleep(250 * time.Millisecond) // two extensions
		return errors.New("fn failed")
	})
	require.EqualError(t, err, "fn failed")
	e := rec.last(t, OpDo)
	assert.Equal(t, Released, e.Outcome, "the lock was held throughout; fn's error is in Err")
	assert.True(t, e.Ended)
	assert.GreaterOrEqual(t, e.Held, 250*time.Millisecond)

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.NotEmpty(t, rec.dos)
	for i, d := range rec.dos {
		assert.Equal(t, DoEvent{Key: "job", Time: d.Time, Extension: i + 1, Outcome: Extended}, d)
	}
	var ops []Op
	for _, e := range rec.ends {
		ops = append(ops, e.Op)
	}
	assert.Equal(t, OpLock, ops[0])
	assert.Equal(t, OpUnlock, ops[len(ops)-2])
	assert.Equal(t, len(rec.dos), slices.Index(ops, OpUnlock)-1, "one Extend event per extension")
}

// TestObserverDoLost: when the lock is gone from the nodes, Do's next
// extension finds it not held, and the Do event says so. The watchdog runs
// on a fake clock: the extension, however slow, decides.
func TestObserverDoLost(t *testing.T) {
	c := newCluster(t, 3)
	rec := &recorder{}
	fc := clock.NewFake(time.Unix(1000, 0))
	cl := c.client(t, &Options{Observer: rec.observer(), Clock: fc})
	gone, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- cl.Do(t.Context(), "job", doTTL, func(ctx context.Context) error {
			for _, m := range c.srv {
				m.Del("job") // another client's mistake: the lock is gone
			}
			close(gone)
			<-ctx.Done()
			return context.Cause(ctx)
		})
	}()
	<-gone
	require.Eventually(t, func() bool { return fc.WaitingFor(doTTL / 3) }, 5*time.Second, time.Millisecond, "the watchdog sleeps until the first extension")
	fc.Advance(doTTL / 3)
	err := <-done
	require.ErrorIs(t, err, ErrLockLost)
	assert.Equal(t, Lost, rec.last(t, OpDo).Outcome)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.dos, 1)
	assert.Equal(t, Lost, rec.dos[0].Outcome)
	assert.ErrorIs(t, rec.dos[0].Err, ErrNotHeld)
}

// TestLogLevels shows that the healthy path logs nothing at Info or above,
// and that a failing node's records name it with the attribute "node".
func TestLogLevels(t *testing.T) {
	c := newCluster(t, 3)
	var logs logBuffer
	cl := c.client(t, &Options{Logger: logs.logger()})
	ctx := t.Context()
	for range 3 {
		l, err := cl.Lock(ctx, "k", time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Extend(ctx, time.Second))
		require.NoError(t, l.Unlock(ctx))
	}
	require.NoError(t, cl.Do(ctx, "job", 300*time.Millisecond, func(context.Context) error {
		time.Sleep(150 * time.Millisecond)
		return nil
	}))
	settle(cl)
	for _, level := range []string{"level=INFO", "level=WARN", "level=ERROR"} {
		assert.NotContains(t, logs.String(), level, "nothing to say on the healthy path")
	}

	l, err := cl.Lock(ctx, "k", time.Second)
	require.NoError(t, err)
	c.hooks[2].set(nil, errors.New("connection reset"))
	require.NoError(t, l.Unlock(ctx))
	settle(cl)
	out := logs.String()
	assert.Contains(t, out, "level=DEBUG")
	assert.Contains(t, out, "node="+c.srv[2].Addr())
	assert.Contains(t, out, "key=k")
	for _, level := range []string{"level=INFO", "level=WARN", "level=ERROR"} {
		assert.NotContains(t, out, level, "a node that fails a release is not the caller's concern")
	}
}

func TestJoinObservers(t *testing.T) {
	assert.Nil(t, JoinObservers(nil, &Observer{}))
	c := newCluster(t, 3)
	a, b := &recorder{}, &recorder{}
	type firstKey struct{}
	var sawFirst bool
	first := a.observer()
	firstBegin := first.Begin
	first.Begin = func(ctx context.Context, op Op, keys []string) context.Context {
		return context.WithValue(firstBegin(ctx, op, keys), firstKey{}, true)
	}
	second := b.observer()
	secondBegin := second.Begin
	second.Begin = func(ctx context.Context, op Op, keys []string) context.Context {
		sawFirst = ctx.Value(firstKey{}) == true
		return secondBegin(ctx, op, keys)
	}
	cl := c.client(t, &Options{Observer: JoinObservers(first, nil, &Observer{End: func(context.Context, Event) {}}, second)})
	l, err := cl.TryLock(t.Context(), "k", time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	assert.True(t, sawFirst, "the second Begin gets the first's context")
	for _, r := range []*recorder{a, b} {
		assert.Equal(t, Released, r.last(t, OpUnlock).Outcome)
		r.mu.Lock()
		assert.Len(t, r.ends, 2)
		r.mu.Unlock()
	}
}

// TestSlowHookDelaysOnlyItsCaller shows that a hook runs after the round it
// reports, on the caller's goroutine: while the hook holds on, TryLock has
// not returned, and yet the event the hook got is complete and the key is
// held on a quorum of the nodes.
func TestSlowHookDelaysOnlyItsCaller(t *testing.T) {
	c := newCluster(t, 3)
	rec := &recorder{}
	inner := rec.observer()
	slow := *inner
	entered, gate := make(chan Event, 1), make(chan struct{})
	slow.End = func(ctx context.Context, e Event) {
		if e.Op == OpTryLock {
			entered <- e
			<-gate
		}
		inner.End(ctx, e)
	}
	cl := c.client(t, &Options{Observer: &slow})
	lc, ec := make(chan *Lock, 1), make(chan error, 1)
	go func() {
		l, err := cl.TryLock(t.Context(), "k", 10*time.Second)
		lc <- l
		ec <- err
	}()
	e := <-entered
	require.Len(t, e.Rounds, 1)
	assert.Positive(t, e.Rounds[0].Duration, "the round was over before the hook ran")
	assert.Positive(t, e.Duration, "the event was complete before the hook ran")
	assert.GreaterOrEqual(t, c.keys("k"), 2, "the round did not wait for the hook")
	select {
	case <-lc:
		t.Error("TryLock returned while its hook ran: the hook is not on the caller's goroutine")
	default:
	}
	close(gate)
	l := <-lc
	require.NoError(t, <-ec)
	assert.Positive(t, time.Until(l.Until()))
	require.NoError(t, l.Unlock(t.Context()))
}
