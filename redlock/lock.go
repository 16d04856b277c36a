package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/node"
	"github.com/redquorum/redquorum/internal/queue"
)

// Lock is one held lock, returned by [Client.Lock] or [Client.TryLock]. Its
// methods are safe for concurrent use.
//
// Trust a Lock until [Lock.Until], not after. Keep the work under it
// shorter than that, or [Lock.Extend] it.
//
// The methods of a nil *Lock, which a failed Lock returns, do not panic, so
// a deferred Unlock written before the error check is harmless. Unlock,
// Extend and TTL return an error wrapping [ErrNotHeld]. Until returns the
// zero time, Fence 0, and Key, Keys and Token empty values.
type Lock struct {
	c     *Client
	keys  []string // as given by the caller
	token string   // 128 random bits
	ttl   time.Duration
	fence uint64
	held  *round                // the round that obtained the lock: which nodes granted it
	turn  *queue.Turn[handover] // the local queue's turn this lock keeps; nil for TryLock

	mu       sync.Mutex
	until    time.Time
	released bool
}

// newLock returns the handle of the lock that r obtained. Once Close has
// begun to release the Client's locks, it releases r instead and returns
// ErrClosed. Callers are within c.life.enter.
func newLock(r *round) (*Lock, error) {
	l, c := &r.lock, r.c
	l.c, l.keys, l.token, l.ttl, l.fence, l.held, l.until = c, r.keys, r.acq.Token, r.acq.TTL, r.fence, r, r.until
	if c.locks.add(l) {
		return l, nil
	}
	l.released, l.until = true, time.Time{}
	c.wait.Unlocked(l.token)
	c.release(context.Background(), r, true, nil)
	return nil, ErrClosed
}

// nilLockError is the error of op on a nil *Lock: it wraps ErrNotHeld.
type nilLockError string

func (op nilLockError) Error() string {
	return "redlock: " + string(op) + " on a nil Lock: not held (the lock call that returned it failed)"
}
func (nilLockError) Unwrap() error { return ErrNotHeld }

// Key returns the key as passed to Lock, without Options.KeyPrefix; for a
// lock from LockMany, the first key. It returns "" for a nil Lock.
func (l *Lock) Key() string {
	if l == nil {
		return ""
	}
	return l.keys[0]
}

// Keys returns the keys of the lock, as passed to Lock or LockMany. It
// returns nil for a nil Lock.
func (l *Lock) Keys() []string {
	if l == nil {
		return nil
	}
	return slices.Clone(l.keys)
}

// name is how errors and logs name the lock: its key, or its keys joined
// by ", ".
func (l *Lock) name() string { return strings.Join(l.keys, ", ") }

// Fence returns the lock's fencing token when Options.Fencing is set, else
// 0 (also for a nil Lock). The fences of successive holders of one key
// strictly increase, across keys too. Pass the fence with every write to
// the resource, and make it reject a fence lower than the highest it has
// seen. A holder paused beyond [Lock.Until] is then turned away.
//
// A fenced lock costs a second round trip. Fences are exact up to 2^53.
// Why they increase, also after a node lost its data: docs/SAFETY.md,
// "Fences increase and stale writes are refused".
func (l *Lock) Fence() uint64 {
	if l == nil {
		return 0
	}
	return l.fence
}

// Token returns the value that identifies this holder on the nodes: 128
// random bits, then "." and the Client's Options.Owner. It returns "" for
// a nil Lock.
func (l *Lock) Token() string {
	if l == nil {
		return ""
	}
	return l.token
}

// Until returns the end of the lock's validity: the moment until which no
// other client can hold it, under the algorithm's assumptions. It reads the
// Client's clock, so compare it with that clock (time.Now for the default).
// Once Unlock has begun, and for a nil Lock, it returns the zero time,
// which is in the past.
func (l *Lock) Until() time.Time {
	if l == nil {
		return time.Time{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Unlock releases the lock on every node whose key holds its token. It
// returns nil once a quorum released it, or an [*Error] wrapping
// [ErrNotHeld] when fewer than a quorum still held it. A second Unlock
// returns an error wrapping ErrNotHeld. Unlock runs even when ctx is done
// (a deferred Unlock), bounded by Options.NodeTimeout.
//
// When another caller of this Client waits in [Client.Lock] for the same
// keys, Unlock hands the lock over without contacting the nodes. It then
// cannot tell whether a quorum still held the lock. See docs/OPERATING.md,
// "Unlock and handovers".
func (l *Lock) Unlock(ctx context.Context) error {
	if l == nil {
		return nilLockError("unlock")
	}
	c := l.c
	if c.obs == nil {
		return l.unlock(ctx, nil, true)
	}
	ctx, rec := c.begin(ctx, OpUnlock, l.keys)
	rec.lock = l
	err := l.unlock(ctx, rec, true)
	rec.end(err, Released)
	return err
}

// unlock is Unlock, recorded in rec when not nil. handOver allows handing
// the lock over to a waiter of this Client instead of releasing it.
func (l *Lock) unlock(ctx context.Context, rec *record, handOver bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.c
	if l.released {
		return &Error{Op: "unlock", Key: l.name(), Quorum: c.cfg.quorum, Reason: "already unlocked", sentinel: ErrNotHeld}
	}
	if err := c.life.enter(); err != nil {
		return err
	}
	defer c.life.exit()
	l.released = true
	until := l.until
	l.until = time.Time{} // in the past: the lock is no longer to be trusted
	c.locks.remove(l)
	if rec != nil {
		rec.ended = true
	}
	c.wait.Unlocked(l.token)
	if handOver && c.cfg.clock.Now().Before(until) && c.queue.HandOver(l.turn, l.held.handover()) {
		return nil // the next local caller's round takes the keys over
	}
	// The release does not depend on ctx: a caller's context that has
	// ended (a deferred Unlock after the request was cancelled) still
	// releases the lock, within the release round's own timeout.
	ctx = detach(ctx)
	start, lat := rec.now(), rec.latencies()
	r := c.release(ctx, l.held, true, lat)
	ok, err := r.Await(ctx, c.cfg.quorum)
	if rec != nil {
		rec.add(start, r, lat, plainRound, nil, false)
	}
	c.queue.Leave(l.turn) // the next local caller may start its rounds
	if err != nil {
		return c.newError("unlock", l.name(), ok, r, ErrNotHeld, err)
	}
	return nil
}

// ctxError is the error of op on the lock named key when ctx ended it
// before the nodes decided anything: it wraps err, the context's error.
func ctxError(op, key string, err error) error {
	return fmt.Errorf("redlock: %s %q: %w", op, shortKey(key), err)
}

// tokenGone reports whether e, the failure of an extend, shows the lock
// lost for good: so many nodes no longer hold its token that a quorum
// cannot, whatever the others answer.
func (c *Client) tokenGone(e *Error) bool {
	gone := 0
	for _, n := range e.Nodes {
		if errors.Is(n.Err, node.ErrNotOurs) {
			gone++
		}
	}
	return gone > len(c.nodes)-c.cfg.quorum
}

// Extend sets the lock's TTL to ttl on every node that still holds its
// token. If a quorum did so in time, it moves [Lock.Until] to the round's
// start plus the new validity. Otherwise the error wraps [ErrNotHeld]:
// treat the lock as lost. If ctx ended before the nodes decided, the error
// wraps ctx.Err() instead, and the lock stays held until Until.
//
// A failed Extend deletes nothing. Its calls outlive ctx and may still set
// ttl: Until drops to the call's start plus ttl minus the drift allowance,
// if earlier. See docs/DESIGN.md, "Unlock, Extend and redelivery". With the
// validity run out or ctx done already, it sends nothing and keeps Until.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if l == nil {
		return nilLockError("extend")
	}
	c := l.c
	if c.obs == nil {
		return l.extend(ctx, ttl, nil)
	}
	ctx, rec := c.begin(ctx, OpExtend, l.keys)
	err := l.extend(ctx, ttl, rec)
	rec.end(err, Extended)
	return err
}

// extend is Extend, recorded in rec when not nil.
func (l *Lock) extend(ctx context.Context, ttl time.Duration, rec *record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.c
	ttl, err := c.checkTTL(ttl)
	if err != nil {
		return err
	}
	if err := c.life.enter(); err != nil {
		return err
	}
	defer c.life.exit()
	start := c.cfg.clock.Now()
	if l.released || !start.Before(l.until) {
		reason := fmt.Sprintf("validity ran out %v ago", start.Sub(l.until).Round(time.Millisecond))
		if l.released {
			reason = "already unlocked"
		}
		return &Error{Op: "extend", Key: l.name(), Quorum: c.cfg.quorum, Reason: reason, sentinel: ErrNotHeld}
	}
	if err := ctx.Err(); err != nil {
		return ctxError("extend", l.name(), err)
	}
	held, lat := l.held, rec.latencies()
	r := c.start(detach(ctx), c.cfg.nodeTimeout, timed(lat, func(ctx context.Context, i int) error { // as a round's acquires
		if held.calls != nil { // nil: handed off on the node (see handedRound)
			if res, done := held.calls.Result(i); done && refused(res) {
				return errSkipped
			}
		}
		return c.nodes[i].Extend(ctx, held.acq.Keys, held.acq.Layer, l.token, ttl)
	}))
	ok, qerr := r.Await(ctx, c.cfg.quorum)
	if rec != nil {
		rec.add(start, r, lat, plainRound, nil, false)
	}
	validity := clock.Validity(ttl, c.cfg.clock.Now().Sub(start), c.cfg.drift)
	if qerr != nil || validity <= 0 {
		// The calls outlive ctx: any node may still set the new ttl.
		l.shorten(start.Add(clock.Validity(ttl, 0, c.cfg.drift)))
		e := c.newError("extend", l.name(), ok, r, ErrNotHeld, qerr)
		if cerr := ctx.Err(); qerr != nil && cerr != nil && !c.tokenGone(e) {
			return ctxError("extend", l.name(), cerr) // undecided: the lock is as held as before
		}
		if qerr == nil {
			e.Reason = fmt.Sprintf("the round took too long: validity %v", validity)
		}
		return e
	}
	l.until = start.Add(validity)
	if l.turn != nil {
		c.queue.Held(l.turn, l.until) // local waiters watch the new expiry
	}
	return nil
}

// shorten moves l.until back to until when that is earlier. l.mu is held.
func (l *Lock) shorten(until time.Time) {
	if !until.Before(l.until) {
		return
	}
	l.until = until
	if l.turn != nil {
		l.c.queue.Held(l.turn, l.until)
	}
}
