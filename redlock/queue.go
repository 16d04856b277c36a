package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// The local queue lets only one caller of [Client.Lock] per key per Client
// run lock rounds at a time; the others wait in this process, in arrival
// order, and the caller that obtains the lock keeps its turn until it
// unlocks, when the next waiter starts its rounds at once. Callers of one
// Client then never split the nodes' votes between them, and they share a
// busy key fairly. Safety does not depend on the queue: it only decides who
// may send lock rounds, and every round is decided on the nodes as before.
//
// A holder that never unlocks keeps its turn only until its validity
// ([Lock.Until]) has passed; the first waiter then takes the turn over.

// turns is a Client's queues, one per key with callers. Its zero value is
// ready to use.
type turns struct {
	mu     sync.Mutex
	queues map[string]*turnQueue
	closed chan struct{} // closed by Client.Close: waiters give up
}

// turnQueue is one key's owner and its waiters, in arrival order.
type turnQueue struct {
	owner    *turn
	waiting  []*turn
	changed  chan struct{} // when not nil, closed when the owner obtains its lock
	handoffs int           // locks handed over in a row (see turns.handOff)
}

// turn is one caller's place in a key's queue.
type turn struct {
	key   string
	ready chan struct{} // closed when the turn is handed to this caller
	lock  *Lock         // set once the owner holds the lock; guarded by turns.mu
	// inherit is the lock the previous owner handed over with the turn
	// (see turns.handOff), set before ready is closed.
	inherit *Lock
}

// errGaveUp ends a wait in the queue when Options.MaxWait has passed.
var errGaveUp = errors.New("gave up")

// queueError is the error of a Lock that ended while waiting in the queue.
func (c *Client) queueError(key string, err error) error {
	if errors.Is(err, ErrClosed) {
		return ErrClosed
	}
	e := &Error{Op: "lock", Key: key, Quorum: c.cfg.quorum, sentinel: ErrNotObtained,
		Reason: "waited behind other callers of this Client for the key"}
	if errors.Is(err, errGaveUp) {
		e.Reason = joinReason(e.Reason, fmt.Sprintf("gave up after Options.MaxWait %v", c.cfg.maxWait))
	} else {
		e.cause = err
	}
	return e
}

func newTurns() *turns { return &turns{queues: map[string]*turnQueue{}, closed: make(chan struct{})} }

// wait returns the caller's turn for key: at once when nobody else of this
// Client is contending for or holding key, else when the previous owner
// unlocks, fails, or lets its lock's validity run out. It returns ctx.Err(),
// errGaveUp when the channel from giveUp fires, or ErrClosed, having left
// the queue.
func (ts *turns) wait(ctx context.Context, key string, giveUp func() <-chan time.Time, c *Client) (*turn, error) {
	ts.mu.Lock()
	q := ts.queues[key]
	var t *turn
	if q == nil {
		// The first caller's turn and the queue in one allocation.
		a := &struct {
			turn
			turnQueue
		}{turn: turn{key: key}}
		t, q = &a.turn, &a.turnQueue
		ts.queues[key] = q
	} else {
		t = &turn{key: key}
	}
	if q.owner == nil {
		q.owner = t
		ts.mu.Unlock()
		return t, nil
	}
	t.ready = make(chan struct{})
	q.waiting = append(q.waiting, t)
	ts.mu.Unlock()
	for {
		// Wake when the owner's lock expires, in case it never unlocks.
		// (Lock.Until takes the lock's mutex, which Unlock holds while it
		// calls leave: read it outside ts.mu.)
		ts.mu.Lock()
		if q.changed == nil {
			q.changed = make(chan struct{})
		}
		changed, owner := q.changed, q.owner
		ts.mu.Unlock()
		var expiry <-chan time.Time
		if l := owner.heldLock(ts); l != nil && owner != t {
			expiry = c.cfg.clock.After(l.Until().Sub(c.cfg.clock.Now()))
		}
		var err error
		select {
		case <-t.ready:
			return t, nil
		case <-changed:
			continue
		case <-expiry:
			if l := owner.heldLock(ts); l != nil && !c.cfg.clock.Now().Before(l.Until()) {
				ts.mu.Lock()
				if q.owner == owner {
					ts.takeOver(q, t)
				}
				ts.mu.Unlock()
			}
			continue
		case <-ctx.Done():
			err = ctx.Err()
		case <-giveUp():
			err = errGaveUp
		case <-ts.closed:
			err = ErrClosed
		}
		ts.leave(t)
		return nil, err
	}
}

// heldLock returns the lock t's owner holds, or nil while it is still
// contending.
func (t *turn) heldLock(ts *turns) *Lock {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return t.lock
}

// takeOver makes t the owner of q, ahead of the current one. Callers hold
// ts.mu.
func (ts *turns) takeOver(q *turnQueue, t *turn) {
	for i, w := range q.waiting {
		if w == t {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			break
		}
	}
	q.owner = t
	close(t.ready)
}

// leave gives up t: it passes the turn on when t owns it and takes t out of
// the queue otherwise. For a turn that lost its ownership (its lock expired
// and a waiter took over) it does nothing.
func (ts *turns) leave(t *turn) {
	if t == nil {
		return
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	q := ts.queues[t.key]
	switch {
	case q == nil:
	case q.owner != t:
		for i, w := range q.waiting {
			if w == t {
				q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
				break
			}
		}
	case len(q.waiting) == 0:
		delete(ts.queues, t.key)
	default:
		next := q.waiting[0]
		q.waiting = q.waiting[1:]
		q.owner = next
		close(next.ready)
	}
}

// maxHandoffs bounds the locks handed over in a row between callers of one
// Client (see turns.handOff). After that many, an Unlock releases the key
// on the nodes and announces it, so that waiters in other processes get
// their chance too.
const maxHandoffs = 3

// handOff passes the turn of l's owner, and l itself, to the first waiter of
// this Client for the same keys, if there is one and fewer than maxHandoffs
// locks were handed over in a row. It reports whether it did: the waiter's
// first round then takes l's keys as free (the acquire script's ARGV[6]),
// and l is released on whatever nodes that round did not take over.
//
// This saves a release round and a lock round's worth of waiting between two
// local holders. It does not weaken the lock: l's keys stay on the nodes,
// as if l were still held, until the waiter's round replaces them with its
// own token, atomically on each node, and that round obtains the lock by the
// usual rule (a quorum, in time), on a monotonic clock of its own.
func (ts *turns) handOff(l *Lock) bool {
	t := l.turn
	if t == nil {
		return false
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	q := ts.queues[t.key]
	if q == nil || q.owner != t || len(q.waiting) == 0 {
		return false
	}
	if q.handoffs >= maxHandoffs {
		q.handoffs = 0
		return false
	}
	q.handoffs++
	next := q.waiting[0]
	q.waiting = q.waiting[1:]
	q.owner = next
	next.inherit = l
	close(next.ready)
	return true
}

// held records that t's owner now holds l.
func (ts *turns) held(t *turn, l *Lock) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t.lock = l
	l.turn = t
	if q := ts.queues[t.key]; q != nil && q.owner == t && q.changed != nil {
		close(q.changed) // waiters now watch the lock's expiry
		q.changed = nil
	}
}

// close makes every waiter give up with ErrClosed.
func (ts *turns) close() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	select {
	case <-ts.closed:
	default:
		close(ts.closed)
	}
}
