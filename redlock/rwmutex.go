package redlock

import (
	"context"
	"time"

	"github.com/redquorum/redquorum/internal/protocol"
)

// RWMutexReaders is how many readers may hold a [RWMutex] at once: its
// readers share a semaphore of that many slots.
const RWMutexReaders = protocol.Readers

// RWMutex is a read-write lock on the Client's nodes: many readers at
// once (up to [RWMutexReaders]), or one writer and no reader. A reader
// holds one slot of a semaphore, a writer its writer key. A node grants a
// reader only while no token holds the writer key there, and a writer only
// while no token holds a reader slot. So readers and writers exclude each
// other under the same assumptions as a [Lock]. A waiting writer leaves an
// intent on the nodes that makes new readers wait, so readers cannot
// starve it. See docs/SEMAPHORES.md. An RWMutex is a name and a Client: it
// holds no state, and is safe for concurrent use.
type RWMutex struct {
	sem Semaphore
}

// RWMutex returns the read-write lock named name on c's nodes. Its keys
// are Options.KeyPrefix + "redquorum:rw:" + name, then ":" and a reader
// slot's number, "writer" or "limit". The limit record also tells readers
// that a writer waits. The methods check the name, as a [Semaphore]'s do.
// On a Redis Cluster or Ring node, the name needs a hash tag, as in
// "{prices}".
func (c *Client) RWMutex(name string) *RWMutex {
	return &RWMutex{sem: Semaphore{c: c, name: name, limit: RWMutexReaders, prefix: protocol.RWMutexPrefix}}
}

// Name returns the read-write lock's name.
func (rw *RWMutex) Name() string { return rw.sem.name }

// RLock waits until no writer holds or waits for the lock and a reader
// slot is free, and returns the reader's [Lock], as [Client.Lock] waits.
// Uncontended, it costs one round trip. Unlock, Extend, Until and TTL act
// on it as on any lock; its Key is its slot's key. Errors are as for
// [Semaphore.Acquire].
func (rw *RWMutex) RLock(ctx context.Context, ttl time.Duration) (*Lock, error) {
	return rw.take(ctx, OpRLock, protocol.Reader, ttl, true)
}

// TryRLock is [RWMutex.RLock] without waiting: it returns an error
// wrapping [ErrNotObtained] when a writer holds or waits for the lock, or
// every reader slot is taken.
func (rw *RWMutex) TryRLock(ctx context.Context, ttl time.Duration) (*Lock, error) {
	return rw.take(ctx, OpTryRLock, protocol.Reader, ttl, false)
}

// Lock waits until it holds the lock alone, with no reader and no other
// writer, and returns the writer's [Lock]; its Key is the writer key.
// Uncontended, it costs one round trip. While it waits, its rounds leave
// an intent on the nodes that refuses new readers, so the holding readers
// drain. The intent lasts twice Options.MaxRetryDelay plus twice
// Options.NodeTimeout past the writer's last round. Once granted, the
// writer key turns readers away until Unlock. Errors are as for
// [Semaphore.Acquire].
func (rw *RWMutex) Lock(ctx context.Context, ttl time.Duration) (*Lock, error) {
	return rw.take(ctx, OpWLock, protocol.Writer, ttl, true)
}

// TryLock is [RWMutex.Lock] in one round: it returns an error wrapping
// [ErrNotObtained] when a reader or a writer holds the lock. Its round
// leaves no intent.
func (rw *RWMutex) TryLock(ctx context.Context, ttl time.Duration) (*Lock, error) {
	return rw.take(ctx, OpTryWLock, protocol.Writer, ttl, false)
}

// take is RLock (role Reader) or Lock (role Writer), waiting when wait is
// set, reported to the Observer as op.
func (rw *RWMutex) take(ctx context.Context, op Op, role protocol.Role, ttl time.Duration, wait bool) (*Lock, error) {
	s := &rw.sem
	if err := s.check(); err != nil {
		return nil, err
	}
	c := s.c
	sr := slotRounds{sem: s, wait: wait, layer: protocol.Layer{Role: role, Keys: []string{c.stored(s.key("limit"))}, Limit: s.limitArg()}}
	if role == protocol.Reader {
		sr.reader = true
		sr.layer.Keys = append([]string{c.stored(s.key("writer"))}, sr.layer.Keys...)
	} else {
		sr.writer = s.key("writer")
		var intent time.Duration // TryLock's round leaves no intent
		if wait {
			intent = 2*c.cfg.maxRetry + 2*c.cfg.nodeTimeout
		}
		sr.layer.Intent = protocol.Intent(intent)
	}
	lock, _, err := c.slots(ctx, op, sr, ttl)
	return lock, err
}

// Holders returns the holders of the read-write lock that a quorum of
// nodes agree on: its readers, each with its Slot, or its writer (and no
// reader). It reads every node once, in parallel, and changes nothing. It
// leaves out a slot on which no quorum agrees, as during a round. Use it
// to see who holds the lock, never to decide whether to take it.
func (rw *RWMutex) Holders(ctx context.Context) (readers []Holder, writer Holder, err error) {
	s := &rw.sem
	if err := s.check(); err != nil {
		return nil, Holder{}, err
	}
	all, err := s.holders(ctx, s.key("writer"))
	if err != nil {
		return nil, Holder{}, err
	}
	if len(all) > 0 && all[0].Slot == -1 {
		writer = all[0] // a quorum that agrees on a reader shares a node with it
		writer.Slot = 0
		return nil, writer, nil
	}
	return all, Holder{}, nil
}
