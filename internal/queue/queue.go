// Package queue is a client's local queue of lock callers, one per key.
// Only one caller per key per client runs lock rounds at a time. The others
// wait in this process, in arrival order. The caller that obtains the lock
// keeps its turn until it unlocks, and the next waiter then starts its rounds
// at once. So callers of one client never split the nodes' votes between
// them, and they share a busy key fairly. Safety does not depend on the
// queue: it only decides who may send lock rounds, and every round is
// decided on the nodes.
//
// A holder that never unlocks keeps its turn only until its lock's validity
// has passed. The first waiter then gets the turn.
package queue

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redquorum/redquorum/clock"
)

// Why a wait in the queue ended without a turn (besides ctx.Err()).
var (
	// ErrGaveUp: the caller's give-up channel fired.
	ErrGaveUp = errors.New("gave up")
	// ErrClosed: the queue was closed.
	ErrClosed = errors.New("queue closed")
)

// MaxHandovers bounds the locks handed over in a row between callers of one
// client (see [Queue.HandOver]). After that many, an unlock releases the key
// on the nodes and announces it, so that waiters in other processes get
// their chance too.
const MaxHandovers = 3

// Queue is a client's queues, one per key with callers. H is what an owner
// passes on with its turn: the lock it hands over (see [Queue.HandOver]). It
// is safe for concurrent use; make it with [New].
type Queue[H any] struct {
	clock  clock.Clock
	mu     sync.Mutex
	keys   map[string]*keyQueue[H]
	closed chan struct{} // closed by Close: waiters give up
}

// keyQueue is one key's owner and its waiters, in arrival order. Its fields
// are guarded by Queue.mu.
type keyQueue[H any] struct {
	owner     *Turn[H]
	waiting   []*Turn[H]
	changed   chan struct{} // when not nil, closed when the owner obtains its lock or extends it
	handovers int           // locks handed over in a row
}

// Turn is one caller's place in a key's queue.
type Turn[H any] struct {
	key   string
	ready chan struct{} // closed when the turn is handed to this caller
	// Guarded by Queue.mu:
	held  bool      // the owner holds its lock
	until time.Time // the end of its validity, when held
	// handover is the lock the previous owner handed over with the turn,
	// set before ready is closed.
	handover H
}

// New returns an empty queue that reads the time from clk.
func New[H any](clk clock.Clock) *Queue[H] {
	return &Queue[H]{clock: clk, keys: map[string]*keyQueue[H]{}, closed: make(chan struct{})}
}

// Wait returns the caller's turn for key, and the lock handed over with it
// (the zero H if none). It returns at once when nobody else of this client
// contends for or holds key. Otherwise it returns when the previous owner
// unlocks, fails, or lets its lock's validity run out. It fails with
// ctx.Err(), with ErrGaveUp when the channel from giveUp fires, or with
// ErrClosed, having left the queue. A lock handed over to a caller that gives
// up at the same moment goes on to the next waiter. When there is none, Wait
// returns it with the error, and the caller must release it.
func (q *Queue[H]) Wait(ctx context.Context, key string, giveUp func() <-chan time.Time) (*Turn[H], H, error) {
	t, k := q.join(key)
	if t.ready == nil {
		var none H
		return t, none, nil
	}
	for {
		changed, expiry := q.watch(k, t)
		var err error
		select {
		case <-t.ready:
			return t, t.handover, nil
		case <-changed:
			continue
		case <-expiry:
			q.passExpired(k, t)
			continue
		case <-ctx.Done():
			err = ctx.Err()
		case <-giveUp():
			err = ErrGaveUp
		case <-q.closed:
			err = ErrClosed
		}
		return nil, q.giveUp(t), err
	}
}

// giveUp takes t out of its queue. If t had become the owner meanwhile, it
// passes the turn on, with any lock handed over to t. It returns that lock
// when no waiter is left to take it.
func (q *Queue[H]) giveUp(t *Turn[H]) H { return q.leave(t, true) }

// TryJoin returns the caller's turn for key, as Wait would at once, when
// nobody else of this client contends for or holds key. Otherwise it returns
// nil without joining the queue.
func (q *Queue[H]) TryJoin(key string) *Turn[H] {
	q.mu.Lock()
	defer q.mu.Unlock()
	if k := q.keys[key]; k != nil && k.owner != nil {
		return nil
	}
	t, _ := q.joinLocked(key)
	return t
}

// join puts a new turn for key in its queue. The turn is the owner (ready
// nil) when the key has none, else the last waiter.
func (q *Queue[H]) join(key string) (*Turn[H], *keyQueue[H]) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.joinLocked(key)
}

// joinLocked is join; callers hold q.mu.
func (q *Queue[H]) joinLocked(key string) (*Turn[H], *keyQueue[H]) {
	k := q.keys[key]
	var t *Turn[H]
	if k == nil {
		// The first caller's turn and the queue in one allocation.
		a := &struct {
			Turn[H]
			keyQueue[H]
		}{Turn: Turn[H]{key: key}}
		t, k = &a.Turn, &a.keyQueue
		q.keys[key] = k
	} else {
		t = &Turn[H]{key: key}
	}
	if k.owner == nil {
		k.owner = t
		return t, k
	}
	t.ready = make(chan struct{})
	k.waiting = append(k.waiting, t)
	return t, k
}

// watch returns changed, which is closed when k's owner obtains or extends
// its lock, or when the first waiter changes. For the first waiter it also
// returns expiry, which fires when the owner's lock expires. expiry is nil
// while the owner holds no lock. Only the first waiter may take an expired
// owner's turn, so only it watches.
func (q *Queue[H]) watch(k *keyQueue[H], t *Turn[H]) (changed <-chan struct{}, expiry <-chan time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if k.changed == nil {
		k.changed = make(chan struct{})
	}
	if o := k.owner; o.held && o != t && len(k.waiting) > 0 && k.waiting[0] == t {
		expiry = q.clock.After(o.until.Sub(q.clock.Now()))
	}
	return k.changed, expiry
}

// notify wakes k's waiters to look again (see watch). Callers hold q.mu.
func (k *keyQueue[H]) notify() {
	if k.changed != nil {
		close(k.changed)
		k.changed = nil
	}
}

// passExpired makes t the owner of k in place of the current owner, if that
// owner's lock has expired and t is the first waiter. Other waiters may see
// the expiry too, and the first of them to run must not jump the queue.
func (q *Queue[H]) passExpired(k *keyQueue[H], t *Turn[H]) {
	q.mu.Lock()
	defer q.mu.Unlock()
	o := k.owner
	if o == nil || o == t || !o.held || q.clock.Now().Before(o.until) || len(k.waiting) == 0 || k.waiting[0] != t {
		return
	}
	k.waiting = remove(k.waiting, t)
	k.owner = t
	close(t.ready)
	k.notify() // the next waiter is first now
}

func remove[H any](ts []*Turn[H], t *Turn[H]) []*Turn[H] {
	for i, w := range ts {
		if w == t {
			return append(ts[:i], ts[i+1:]...)
		}
	}
	return ts
}

// Leave gives up t. It passes the turn on when t owns it, and otherwise
// takes t out of the queue. It does nothing for a turn that lost its
// ownership, because its lock expired and a waiter got the turn. A nil t is
// ignored.
func (q *Queue[H]) Leave(t *Turn[H]) {
	if t != nil {
		q.leave(t, false)
	}
}

// leave is Leave. With handingOver, it passes on the lock handed over to t,
// and returns that lock when no waiter is left to take it. Without it, leave
// counts as a real release, which ends a run of handovers.
func (q *Queue[H]) leave(t *Turn[H], handingOver bool) H {
	q.mu.Lock()
	defer q.mu.Unlock()
	var h, none H
	if handingOver {
		h = t.handover
	}
	k := q.keys[t.key]
	switch {
	case k == nil:
	case k.owner != t:
		k.waiting = remove(k.waiting, t)
		k.notify() // t may have been first
	case len(k.waiting) == 0:
		delete(q.keys, t.key)
		return h
	default:
		if !handingOver {
			k.handovers = 0
		}
		q.pass(k, h)
	}
	return none
}

// pass makes the first waiter of k the owner, with h. Callers hold q.mu.
func (q *Queue[H]) pass(k *keyQueue[H], h H) {
	next := k.waiting[0]
	k.waiting = k.waiting[1:]
	k.owner = next
	next.handover = h
	close(next.ready)
	k.notify() // the next waiter is first now
}

// HandOver passes t's turn, and its lock h, to the first waiter for the same
// key, and reports whether it did. It does so only if t owns the turn, there
// is a waiter, and fewer than [MaxHandovers] locks were handed over in a row.
//
// This saves a release round, and a lock round's worth of waiting, between
// two local holders. It does not weaken the lock. h's keys stay on the nodes,
// as if h were still held, until the waiter's round replaces them with its
// own token, atomically on each node. That round obtains the lock by the
// usual rule, a quorum in time, on a monotonic clock of its own.
func (q *Queue[H]) HandOver(t *Turn[H], h H) bool {
	if t == nil {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	k := q.keys[t.key]
	if k == nil || k.owner != t || len(k.waiting) == 0 {
		return false
	}
	if k.handovers >= MaxHandovers {
		k.handovers = 0
		return false
	}
	k.handovers++
	q.pass(k, h)
	return true
}

// Held records that t's owner holds its lock until until. Called again, it
// records that the owner extended its lock.
func (q *Queue[H]) Held(t *Turn[H], until time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	t.held, t.until = true, until
	if k := q.keys[t.key]; k != nil && k.owner == t {
		k.notify() // the first waiter now watches the lock's expiry
	}
}

// Close makes every waiter give up with ErrClosed. It is safe to call more
// than once.
func (q *Queue[H]) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-q.closed:
	default:
		close(q.closed)
	}
}

// Keys returns how many keys have an owner or waiters.
func (q *Queue[H]) Keys() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.keys)
}

// Waiting returns how many callers wait for key's turn.
func (q *Queue[H]) Waiting(key string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if k := q.keys[key]; k != nil {
		return len(k.waiting)
	}
	return 0
}
