package redlock

import (
	"context"
	"errors"
	"time"
)

// MaxSemaphoreLimit is the largest limit a [Semaphore] accepts. A full
// semaphore costs a waiter one round per slot to find that all are taken,
// so the limit is kept small.
const MaxSemaphoreLimit = 128

// ErrLimitMismatch means that the nodes hold a semaphore of the same name
// with another limit: two Clients disagree on how many may hold it. The
// error that wraps it names both limits.
var ErrLimitMismatch = errors.New("redlock: semaphore limit mismatch")

// Semaphore lets at most Limit holders in at once, on the Client's nodes,
// among every Client that uses the same name and limit. It is made of
// Limit slots, each a lock on the nodes: a [Permit] holds one slot, so
// the bound follows from each slot's mutual exclusion, under the same
// assumptions as a [Lock] (see docs/DESIGN.md, "Semaphores and read-write
// locks"). A Semaphore is a name, a limit and a Client: it holds no
// state, and is safe for concurrent use.
type Semaphore struct {
	c     *Client
	name  string
	limit int
}

// Semaphore returns the semaphore named name with limit slots on c's
// nodes. Its keys are Options.KeyPrefix + "redquorum:sem:" + name and
// what follows, so they never collide with a lock key. The name and limit
// are checked by the methods, which return an error naming a bad value
// and send nothing: an empty name, one under a reserved prefix, a limit
// below 1 or above [MaxSemaphoreLimit]. On a Redis Cluster or Ring node,
// the name needs a hash tag, as in "{reports}".
func (c *Client) Semaphore(name string, limit int) *Semaphore {
	return &Semaphore{c: c, name: name, limit: limit}
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Limit returns the semaphore's limit: how many may hold it at once.
func (s *Semaphore) Limit() int { return s.limit }

// Acquire waits for a free slot and returns its [Permit], as
// [Client.Lock] waits for a lock: until it holds one, ctx is done, or,
// when ctx has no deadline, Options.MaxWait has passed. Uncontended, it
// costs one round trip. A refused slot is followed by the other slots at
// once, in order, before it waits; a release of any slot wakes it.
//
// On failure it returns an error wrapping [ErrNotObtained] (and ctx.Err()
// when ctx ended the wait), or [ErrLimitMismatch] when a quorum cannot
// grant because the nodes hold the name with another limit.
func (s *Semaphore) Acquire(ctx context.Context, ttl time.Duration) (*Permit, error) {
	return nil, errors.New("redlock: Semaphore.Acquire: not implemented yet")
}

// TryAcquire is [Semaphore.Acquire] without waiting: it tries each slot
// at most once, and returns an error wrapping [ErrNotObtained] when all
// are taken.
func (s *Semaphore) TryAcquire(ctx context.Context, ttl time.Duration) (*Permit, error) {
	return nil, errors.New("redlock: Semaphore.TryAcquire: not implemented yet")
}

// Permit is one held slot of a [Semaphore]. Its methods are safe for
// concurrent use, and those of a nil *Permit return errors wrapping
// [ErrNotHeld], as a nil [*Lock]'s do.
type Permit struct {
	sem  *Semaphore
	slot int
	lock *Lock
}

// Slot returns the permit's slot, from 0 to the limit - 1.
func (p *Permit) Slot() int {
	if p == nil {
		return -1
	}
	return p.slot
}

// Lock returns the lock of the permit's slot: Unlock, Extend, Until, TTL
// and Fence act on it as on any lock.
func (p *Permit) Lock() *Lock {
	if p == nil {
		return nil
	}
	return p.lock
}

// Release frees the permit's slot, as [Lock.Unlock] does.
func (p *Permit) Release(ctx context.Context) error { return p.Lock().Unlock(ctx) }

// Extend sets the permit's TTL to ttl, as [Lock.Extend] does.
func (p *Permit) Extend(ctx context.Context, ttl time.Duration) error {
	return p.Lock().Extend(ctx, ttl)
}

// Until returns the end of the permit's validity, as [Lock.Until] does.
func (p *Permit) Until() time.Time { return p.Lock().Until() }

// TTL returns how long a quorum of nodes still hold the permit's slot, as
// [Lock.TTL] does.
func (p *Permit) TTL(ctx context.Context) (time.Duration, error) { return p.Lock().TTL(ctx) }

// Fence returns the fence of the permit's slot when Options.Fencing is
// set, else 0. Fences increase per slot: see docs/DESIGN.md for what a
// fence means for a semaphore.
func (p *Permit) Fence() uint64 { return p.Lock().Fence() }

// DoSemaphore runs fn while holding a permit of the semaphore name with
// limit slots, as [Client.Do] runs fn under a lock: the permit is
// extended while fn runs, fn's context is cancelled with [ErrLockLost]
// when it is lost, and it is released when fn returns. [LockFrom] on
// fn's context returns the permit's lock.
func (c *Client) DoSemaphore(ctx context.Context, name string, limit int, ttl time.Duration, fn func(ctx context.Context) error, opts ...DoOptions) error {
	return errors.New("redlock: DoSemaphore: not implemented yet")
}
