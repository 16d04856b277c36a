package redlock

import (
	"context"
	"errors"
	"time"
)

// RWMutexReaders is how many readers may hold a [RWMutex] at once: its
// readers share a semaphore of that many slots.
const RWMutexReaders = 64

// RWMutex is a read-write lock on the Client's nodes: many readers at
// once (up to [RWMutexReaders]), or one writer and no reader. A reader
// holds one slot of a semaphore; a writer holds every slot, in one lock of
// many keys, so reader and writer exclude each other by each slot's
// mutual exclusion. A waiting writer makes new readers wait, so a stream
// of readers cannot starve it (see docs/DESIGN.md, "Semaphores and
// read-write locks"). An RWMutex is a name and a Client: it holds no
// state, and is safe for concurrent use.
type RWMutex struct {
	sem Semaphore
}

// RWMutex returns the read-write lock named name on c's nodes. Its keys
// are Options.KeyPrefix + "redquorum:rw:" + name and what follows. The
// name is checked by the methods, as a [Semaphore]'s is.
func (c *Client) RWMutex(name string) *RWMutex {
	return &RWMutex{sem: Semaphore{c: c, name: name, limit: RWMutexReaders}}
}

// Name returns the read-write lock's name.
func (rw *RWMutex) Name() string { return rw.sem.name }

// RLock waits until no writer holds or waits for the lock and returns a
// reader's [Lock], as [Client.Lock] waits. Uncontended, it costs one round
// trip. Unlock, Extend, Until and TTL act on it as on any lock.
func (rw *RWMutex) RLock(ctx context.Context, ttl time.Duration) (*Lock, error) {
	return nil, errors.New("redlock: RWMutex.RLock: not implemented yet")
}

// TryRLock is [RWMutex.RLock] in one attempt: it returns an error
// wrapping [ErrNotObtained] when a writer holds or waits for the lock.
func (rw *RWMutex) TryRLock(ctx context.Context, ttl time.Duration) (*Lock, error) {
	return nil, errors.New("redlock: RWMutex.TryRLock: not implemented yet")
}

// Lock waits until it holds the lock alone, with no reader and no other
// writer, and returns the writer's [Lock]. While it waits, new readers
// wait too.
func (rw *RWMutex) Lock(ctx context.Context, ttl time.Duration) (*Lock, error) {
	return nil, errors.New("redlock: RWMutex.Lock: not implemented yet")
}

// TryLock is [RWMutex.Lock] in one attempt.
func (rw *RWMutex) TryLock(ctx context.Context, ttl time.Duration) (*Lock, error) {
	return nil, errors.New("redlock: RWMutex.TryLock: not implemented yet")
}
