package redlock

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/node"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/quorum"
)

// observing is what a Client with an [Observer] keeps: the hooks, and each
// node's state as last reported (see [NodeChange]).
type observing struct {
	*Observer
	// nodes holds, per node, its stateGuarded, stateUnreachable and
	// stateEstablished bits.
	nodes []atomic.Uint32
	// panicked is set once a hook has panicked: only the first is logged.
	panicked atomic.Bool
}

// The bits of a node's state in observing.nodes.
const (
	stateGuarded uint32 = 1 << iota
	stateUnreachable
	// stateEstablished is set once this Client's new-deployment shortcut
	// ended the node's first guard; it is never cleared.
	stateEstablished
)

// roundKind is what the answers of a round tell about the nodes' guards.
type roundKind uint8

const (
	// plainRound: an extend or a release, whose answers tell nothing of a
	// guard.
	plainRound roundKind = iota
	// acquireRound: a guarded answer means the node is in its restart
	// guard, any other answer that it is out of it. Two kinds of guarded
	// answer are a new deployment's, not a guard entered. One comes from a
	// state that carries a new deployment's mark (see newDeploymentMark).
	// The other is an unmarked one in an early round. Its answers may come
	// from a new deployment that other Clients establish meanwhile.
	acquireRound
	// shortcutRound: the observing or marking round of this Client's
	// new-deployment shortcut. Its guarded answers are a new deployment's.
	shortcutRound
	// establishRound: the shortcut's establishing round. A node that
	// answers out of its guard is established (the NodeChange Established).
	establishRound
)

// newObserving returns what a Client with o and n nodes keeps, or nil when
// o has no hook.
func newObserving(o *Observer, n int) *observing {
	if o == nil || (o.Begin == nil && o.End == nil && o.Do == nil && o.Node == nil) {
		return nil
	}
	hooks := *o // later changes to the caller's Observer do not apply
	return &observing{Observer: &hooks, nodes: make([]atomic.Uint32, n)}
}

// record collects one observed operation until it ends. A nil *record is
// an operation that nobody observes: every method then does nothing.
type record struct {
	c      *Client
	ctx    context.Context // the operation's, as returned by Observer.Begin
	op     Op
	keys   []string
	start  time.Time
	rounds []Round
	// first holds the first rounds, allocated with the record; the Event
	// may keep them, since a record is never reused.
	first [2]Round
	lock  *Lock // Do: the lock once obtained
	// gaveUp is set when Lock's waiter ended the wait (the context, MaxWait
	// or Close) rather than a round.
	gaveUp bool
	ended  bool // Unlock: this call ended the lock; Do: the lock was obtained
}

// begin starts the record of an operation and returns its context. Call it
// only with c.obs set.
func (c *Client) begin(ctx context.Context, op Op, keys []string) (context.Context, *record) {
	if c.obs.Begin != nil {
		ctx = c.callBegin(ctx, op, keys)
	}
	rec := &record{c: c, ctx: ctx, op: op, keys: keys, start: c.cfg.clock.Now()}
	rec.rounds = rec.first[:0]
	return ctx, rec
}

// callBegin runs Observer.Begin, keeping ctx if it panics or returns nil.
func (c *Client) callBegin(ctx context.Context, op Op, keys []string) (out context.Context) {
	out = ctx
	defer c.obs.recoverHook(c)
	if next := c.obs.Begin(ctx, op, keys); next != nil {
		out = next
	}
	return out
}

// call runs the hook f with e, recovering a panic.
func call[E any](c *Client, f func(context.Context, E), ctx context.Context, e E) {
	if f == nil {
		return
	}
	defer c.obs.recoverHook(c)
	f(ctx, e)
}

// recoverHook recovers a hook's panic and logs the first one; it must be
// deferred directly.
func (o *observing) recoverHook(c *Client) {
	if p := recover(); p != nil && !o.panicked.Swap(true) {
		c.cfg.log.Warn("redlock: an Observer hook panicked; the event is lost and later panics are not logged", "panic", p)
	}
}

// now returns the time on the Client's clock, or the zero time for a nil
// record.
func (rec *record) now() time.Time {
	if rec == nil {
		return time.Time{}
	}
	return rec.c.cfg.clock.Now()
}

// latencies returns a slice for the latency of each node's request in a
// round, or nil for a nil record.
func (rec *record) latencies() []time.Duration {
	if rec == nil {
		return nil
	}
	return make([]time.Duration, len(rec.c.nodes))
}

// timed returns fn, which records each node's latency in lat unless lat is
// nil. A latency is written before the node's call returns, so it may be
// read once the round reports that call done.
func timed(lat []time.Duration, fn func(context.Context, int) error) func(context.Context, int) error {
	if lat == nil {
		return fn
	}
	return func(ctx context.Context, i int) error {
		t := time.Now() // a socket-level time, as the node timeout is
		err := fn(ctx, i)
		lat[i] = time.Since(t)
		return err
	}
}

// addAcquire records r, an acquire round of the given kind, and the node
// states it shows.
func (rec *record) addAcquire(r *round, kind roundKind) {
	if rec != nil {
		rec.add(r.start, r.calls, r.lat, kind, r.replies, r.early)
	}
}

// add records a round of the given kind started at start, with its
// per-node latencies and, for an acquire round, its replies and whether it
// is early (see acquireRound), and reports the node state changes that its
// answers show.
func (rec *record) add(start time.Time, calls *quorum.Round, lat []time.Duration, kind roundKind, replies []protocol.AcquireReply, early bool) {
	c := rec.c
	now := c.cfg.clock.Now()
	r := Round{Start: start, Duration: now.Sub(start), Nodes: make([]Vote, len(c.nodes))}
	for i, n := range c.nodes {
		v := &r.Nodes[i]
		v.Node = n.Name()
		err, done := calls.Result(i)
		v.Outcome, v.Err = vote(err, done)
		if done && lat != nil && v.Outcome != VoteSkipped {
			v.Latency = lat[i]
		}
		if v.Outcome == VoteGranted {
			r.Granted++
		}
		if done {
			k := kind
			if k == acquireRound && v.Outcome == VoteGuarded && (newDeploymentMark(replies[i].Mark) || early && replies[i].Mark == "") {
				k = shortcutRound
			}
			rec.nodeState(i, v, k, now)
		}
	}
	rec.rounds = append(rec.rounds, r)
}

// answer reports the node state that node i's answer err, in a round of
// the given kind, shows.
func (rec *record) answer(i int, err error, kind roundKind) {
	v := Vote{Node: rec.c.nodes[i].Name()}
	v.Outcome, v.Err = vote(err, true)
	rec.nodeState(i, &v, kind, rec.c.cfg.clock.Now())
}

// vote returns a node's vote for the outcome err of its call, done or not.
func vote(err error, done bool) (VoteOutcome, error) {
	switch {
	case !done:
		return VotePending, nil
	case err == nil, errors.Is(err, ErrFenceUnknown):
		return VoteGranted, err
	case err == errSkipped, err == node.ErrNotSent:
		return VoteSkipped, err
	case errors.Is(err, ErrTaken):
		return VoteTaken, err
	case errors.Is(err, ErrGuarded):
		return VoteGuarded, err
	case err == errGone, errors.Is(err, node.ErrNotOurs):
		return VoteRefused, err
	}
	return VoteFailed, err
}

// nodeState updates node i's state from its vote v in a round of the given
// kind, and reports the changes.
func (rec *record) nodeState(i int, v *Vote, kind roundKind, now time.Time) {
	var set, clear uint32
	switch v.Outcome {
	case VotePending, VoteSkipped:
		return
	case VoteFailed:
		var answer redis.Error
		if errors.As(v.Err, &answer) {
			clear = stateUnreachable // Redis answered, with an error
		} else if !errors.Is(v.Err, context.Canceled) { // the caller's, not the node's doing
			set = stateUnreachable
		}
	case VoteGuarded:
		set, clear = stateGuarded, stateUnreachable
		if kind == shortcutRound {
			set = 0 // a new deployment's first guard, not a loss
		}
	default:
		clear = stateUnreachable
		if kind != plainRound {
			clear |= stateGuarded
		}
		if kind == establishRound {
			set = stateEstablished
		}
	}
	st := &rec.c.obs.nodes[i]
	for {
		old := st.Load()
		next := old&^clear | set
		if next == old || st.CompareAndSwap(old, next) {
			rec.nodeChanged(i, v, old, next, now)
			return
		}
	}
}

// nodeChanged reports the changes of node i's state from old to next.
func (rec *record) nodeChanged(i int, v *Vote, old, next uint32, now time.Time) {
	c := rec.c
	for _, ch := range [...]struct {
		bit     uint32
		on, off NodeChange
	}{{stateGuarded, GuardEntered, GuardLeft}, {stateUnreachable, Unreachable, Reachable}} {
		if old&ch.bit == next&ch.bit {
			continue
		}
		e := NodeEvent{Node: v.Node, Index: i, Change: ch.off, Time: now}
		if next&ch.bit != 0 {
			e.Change = ch.on
			if ch.bit == stateUnreachable {
				e.Err = v.Err
			}
		}
		call(c, c.obs.Node, rec.ctx, e)
	}
	if old&stateEstablished == 0 && next&stateEstablished != 0 {
		call(c, c.obs.Node, rec.ctx, NodeEvent{Node: v.Node, Index: i, Change: Established, Time: now})
	}
}

// outcome returns the Outcome of an operation that returned err, ok when
// err is nil.
func (rec *record) outcome(err error, ok Outcome) Outcome {
	if err == nil {
		return ok
	}
	if rec.op != OpUnlock { // Unlock does not depend on its context
		switch cerr := rec.ctx.Err(); {
		case errors.Is(cerr, context.Canceled):
			return Cancelled
		case cerr != nil, rec.gaveUp && err != ErrClosed:
			return TimedOut
		}
	}
	switch {
	case errors.Is(err, ErrNotHeld), errors.Is(err, ErrLockLost):
		return Lost
	case errors.Is(err, ErrTaken):
		return Taken
	case errors.Is(err, ErrGuarded):
		return Guarded
	}
	return Failed
}

// end reports the operation, which returned err, with ok its outcome on
// success.
func (rec *record) end(err error, ok Outcome) {
	c := rec.c
	e := Event{Op: rec.op, Keys: rec.keys, Outcome: rec.outcome(err, ok), Err: err, Start: rec.start,
		Duration: c.cfg.clock.Now().Sub(rec.start), Ended: rec.ended, Rounds: rec.rounds}
	if rec.op == OpLock || rec.op == OpLockMany || rec.op == OpAcquire || rec.op == OpRLock || rec.op == OpWLock {
		e.Waited = e.Duration
		for _, r := range rec.rounds {
			e.Waited -= r.Duration
		}
		e.Waited = max(e.Waited, 0)
	}
	if rec.lock != nil && rec.ended {
		e.Held = c.cfg.clock.Now().Sub(rec.lock.held.start)
	}
	if rec.op == OpDo && rec.ended && !errors.Is(err, ErrLockLost) {
		e.Outcome = Released // fn's own error does not make the lock fail
	}
	call(c, c.obs.End, rec.ctx, e)
}

// doEvent reports an extension made by Do, or the loss of its lock, when
// c has an Observer.
func (c *Client) doEvent(ctx context.Context, l *Lock, n int, err error) {
	if c.obs == nil || c.obs.Do == nil {
		return
	}
	e := DoEvent{Key: l.keys[0], Time: c.cfg.clock.Now(), Extension: n, Outcome: Extended, Err: err}
	if err != nil {
		e.Outcome = Lost
	}
	call(c, c.obs.Do, ctx, e)
}
