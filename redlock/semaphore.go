package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redquorum/redquorum/internal/hashslot"
	"github.com/redquorum/redquorum/internal/protocol"
)

// MaxSemaphoreLimit is the largest limit a [Semaphore] accepts. A full
// semaphore costs a caller one round per slot to find that every slot is
// taken, so the limit is kept small.
const MaxSemaphoreLimit = 128

// ErrLimitMismatch means that the nodes hold a semaphore of the same name
// with another limit: two Clients disagree on how many may hold it. The
// error that wraps it names both limits. A node keeps a semaphore's limit
// for as long as it holds one of its slots.
var ErrLimitMismatch = errors.New("redlock: semaphore limit mismatch")

// errWriterWaits is the per-node outcome of a reader of a read-write lock
// that a writer holds or waits for.
var errWriterWaits = fmt.Errorf("refused: a writer holds or waits for the lock: %w", ErrTaken)

// limitError is the per-node outcome of an acquire that the node refused
// because it holds the semaphore's name with limit.
type limitError struct{ limit string }

func (e *limitError) Error() string {
	return "refused: the node holds the semaphore with limit " + e.limit
}
func (e *limitError) Unwrap() error { return ErrLimitMismatch }

// Semaphore lets at most Limit holders in at once, on the Client's nodes,
// among every Client that uses the same name and limit. It is Limit slots,
// each a lock on the nodes, and a [Permit] holds one slot. So the bound
// follows from each slot's mutual exclusion, under the same assumptions as
// a [Lock] (see docs/SEMAPHORES.md). A node that grants a slot records the
// limit and refuses a slot to a Client that gives another limit. Clients
// that disagree on the limit thus fail with [ErrLimitMismatch], not mix.
// A Semaphore is a name, a limit and a Client: it holds no state, and is
// safe for concurrent use.
type Semaphore struct {
	c      *Client
	name   string
	limit  int
	prefix string // protocol.SemaphorePrefix, or RWMutexPrefix for a RWMutex's readers
}

// Semaphore returns the semaphore named name with limit slots on c's
// nodes. Its keys are Options.KeyPrefix + "redquorum:sem:" + name, then
// ":" and a slot number or "limit"; they never collide with a lock key.
// The methods check the name and limit, and send nothing when one is bad:
// an empty name, one under a reserved prefix, a limit below 1 or above
// [MaxSemaphoreLimit]. The error names the bad value. On a Redis Cluster
// or Ring node, the name needs a hash tag, as in "{reports}".
func (c *Client) Semaphore(name string, limit int) *Semaphore {
	return &Semaphore{c: c, name: name, limit: limit, prefix: protocol.SemaphorePrefix}
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Limit returns the semaphore's limit: how many may hold it at once.
func (s *Semaphore) Limit() int { return s.limit }

// key returns the semaphore's key named part (a slot number, "limit"),
// without the Client's prefix.
func (s *Semaphore) key(part string) string { return s.prefix + s.name + ":" + part }

// slotKey returns the lock key of slot i, without the Client's prefix.
func (s *Semaphore) slotKey(i int) string { return s.key(strconv.Itoa(i)) }

// kind names the semaphore in errors.
func (s *Semaphore) kind() string {
	if s.prefix == protocol.RWMutexPrefix {
		return "read-write lock"
	}
	return "semaphore"
}

// check validates the semaphore's name and limit.
func (s *Semaphore) check() error {
	c := s.c
	if err := c.checkKeys([]string{s.name}); err != nil {
		return fmt.Errorf("%w (the %s's name)", err, s.kind())
	}
	if s.limit < 1 || s.limit > MaxSemaphoreLimit {
		return fmt.Errorf("redlock: semaphore %q: limit %d is not between 1 and MaxSemaphoreLimit (%d)", s.name, s.limit, MaxSemaphoreLimit)
	}
	if c.sharded && hashslot.Hashed(c.stored(s.slotKey(0))) != hashslot.Hashed(c.stored(s.key("limit"))) {
		return fmt.Errorf("redlock: %s name %q has no hash tag: a node is a Redis Cluster or Ring, where all of its keys must share a hash slot; name it as in {reports}", s.kind(), s.name)
	}
	return nil
}

// layer returns what the semaphore's rounds tell the limit layer on the
// nodes.
func (s *Semaphore) layer() protocol.Layer {
	return protocol.Layer{Role: protocol.Slot, Keys: []string{s.c.stored(s.key("limit"))}, Limit: s.limitArg()}
}

// limitArg returns the limit as the layer's scripts compare it.
func (s *Semaphore) limitArg() string { return strconv.Itoa(s.limit) }

// Acquire waits for a free slot and returns its [Permit], as [Client.Lock]
// waits: until it holds one, ctx is done, or, when ctx has no deadline,
// Options.MaxWait has passed. Uncontended, it costs one round trip, on a
// slot chosen at random. It tries every slot, then waits a backoff or for
// a release (see docs/SEMAPHORES.md). It joins neither the local queue of
// [Client.Lock] nor a line of waiters, whatever Options.Waiting says.
//
// On failure its error wraps [ErrNotObtained], and ctx.Err() when ctx ended
// the wait. If too many nodes hold the name with another limit for a quorum
// to grant, the error also wraps [ErrLimitMismatch] and names both limits.
// Bad arguments give a plain error naming the value, and send nothing.
func (s *Semaphore) Acquire(ctx context.Context, ttl time.Duration) (*Permit, error) {
	return s.acquire(ctx, OpAcquire, ttl, true)
}

// TryAcquire is [Semaphore.Acquire] without waiting: it tries each slot
// at most once, and returns an error wrapping [ErrNotObtained] when all
// are taken.
func (s *Semaphore) TryAcquire(ctx context.Context, ttl time.Duration) (*Permit, error) {
	return s.acquire(ctx, OpTryAcquire, ttl, false)
}

// acquire is Acquire (wait) or TryAcquire, reported to the Observer if
// there is one.
func (s *Semaphore) acquire(ctx context.Context, op Op, ttl time.Duration, wait bool) (*Permit, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	c := s.c
	l, slot, err := c.slots(ctx, op, slotRounds{sem: s, layer: s.layer(), wait: wait}, ttl)
	if err != nil {
		return nil, err
	}
	return &Permit{slot: slot, lock: l}, nil
}

// Permit is one held slot of a [Semaphore]. Its methods are safe for
// concurrent use. Those of a nil *Permit, such as the one a failed Acquire
// returns, do not panic: they act as a nil [*Lock]'s do.
type Permit struct {
	slot int
	lock *Lock
}

// Slot returns the permit's slot, from 0 to the limit - 1; -1 for a nil
// Permit.
func (p *Permit) Slot() int {
	if p == nil {
		return -1
	}
	return p.slot
}

// Lock returns the lock of the permit's slot: Unlock, Extend, Until, TTL
// and Fence act on it as on any lock. It returns nil for a nil Permit.
func (p *Permit) Lock() *Lock {
	if p == nil {
		return nil
	}
	return p.lock
}

// Release frees the permit's slot, as [Lock.Unlock] does: a waiter of
// another Client is told at once.
func (p *Permit) Release(ctx context.Context) error { return p.Lock().Unlock(ctx) }

// Extend sets the permit's TTL to ttl, as [Lock.Extend] does; the nodes
// keep the semaphore's limit for as long.
func (p *Permit) Extend(ctx context.Context, ttl time.Duration) error {
	return p.Lock().Extend(ctx, ttl)
}

// Until returns the end of the permit's validity, as [Lock.Until] does.
func (p *Permit) Until() time.Time { return p.Lock().Until() }

// TTL returns how long a quorum of nodes still hold the permit's slot, as
// [Lock.TTL] does.
func (p *Permit) TTL(ctx context.Context) (time.Duration, error) { return p.Lock().TTL(ctx) }

// Fence returns the fence of the permit's slot when Options.Fencing is
// set, else 0. Fences of successive holders of one slot increase: a fence
// orders the holders of a slot, not those of the semaphore (see
// docs/SEMAPHORES.md).
func (p *Permit) Fence() uint64 { return p.Lock().Fence() }

// DoSemaphore runs fn while holding a permit of the semaphore name with
// limit slots, as [Client.Do] runs fn under a lock. It waits for the
// permit as [Semaphore.Acquire] does, with opts as for Do. It extends the
// permit while fn runs, cancels fn's context with [ErrLockLost] if it is
// lost, and releases it when fn returns. [LockFrom] on fn's context
// returns the permit's lock. Bad arguments, a nil fn included, give an
// error naming the value, and send nothing.
func (c *Client) DoSemaphore(ctx context.Context, name string, limit int, ttl time.Duration, fn func(ctx context.Context) error, opts ...DoOptions) error {
	o, err := checkDoOptions(opts)
	if err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("redlock: DoSemaphore %q with a nil fn", name)
	}
	s := c.Semaphore(name, limit)
	var rec *record
	if c.obs != nil {
		ctx, rec = c.begin(ctx, OpDo, []string{name})
	}
	var p *Permit
	switch {
	case o.Try:
		p, err = s.TryAcquire(ctx, ttl)
	case o.MaxWait > 0:
		wctx, cancel := context.WithTimeout(ctx, o.MaxWait)
		p, err = s.Acquire(wctx, ttl)
		cancel()
	default:
		p, err = s.Acquire(ctx, ttl)
	}
	if err == nil {
		err = c.hold(ctx, p.lock, ttl, fn, rec)
	}
	if rec != nil {
		rec.end(err, Released)
	}
	return err
}

// Holders returns the holders of the semaphore's slots that a quorum of
// nodes agree on, each with its Slot, in slot order. It reads every node
// once, in parallel, and changes nothing. It counts the nodes as
// [Client.Holder] does. It leaves out a slot on which no quorum agrees, as
// during a round or while too few nodes are out of their restart guard.
// Use it to see who holds the semaphore, never to decide whether to take it.
func (s *Semaphore) Holders(ctx context.Context) ([]Holder, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	return s.holders(ctx, "")
}

// holders reads every slot, and first the key first when not "" (as Slot
// -1), and returns those held.
func (s *Semaphore) holders(ctx context.Context, first string) ([]Holder, error) {
	c := s.c
	keys := make([]string, 0, s.limit+1)
	if first != "" {
		keys = append(keys, c.stored(first))
	}
	for i := range s.limit {
		keys = append(keys, c.stored(s.slotKey(i)))
	}
	rd, err := c.read(ctx, keys)
	if err != nil {
		return nil, err
	}
	vals := rd.vals
	var hs []Holder
	for i := range keys {
		h, token, agreed := c.holderOf(vals, i)
		if !agreed || token == "" {
			continue
		}
		h.Slot = i
		if first != "" {
			h.Slot--
		}
		hs = append(hs, h)
	}
	return hs, nil
}
