package redlock

import (
	"context"
	"sync"
	"time"

	"github.com/redquorum/redquorum/quorum"
)

// lifetime is a Client's open or closed state and the calls to the nodes
// that outlive the operations that started them.
type lifetime struct {
	// mu is held for reading by every operation that sends to the nodes
	// (a lock attempt with all its rounds, an Unlock, an Extend), for the
	// whole operation; close takes it for writing, so that it waits for
	// them and no call starts once closed is set.
	mu          sync.RWMutex
	closed      bool
	closing     chan struct{} // closed when Close begins
	closingOnce sync.Once
	// workers runs the rounds' calls on goroutines kept between rounds,
	// and counts the calls in flight, late answers included.
	workers *quorum.Workers
}

func newLifetime() lifetime {
	return lifetime{closing: make(chan struct{}), workers: quorum.NewWorkers()}
}

// enter begins an operation that sends to the nodes, or returns ErrClosed.
// Call exit when the operation returns.
func (lt *lifetime) enter() error {
	lt.mu.RLock()
	if lt.closed {
		lt.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

// exit ends what enter began.
func (lt *lifetime) exit() { lt.mu.RUnlock() }

// begin marks the beginning of Close: the waits for a lock end with
// ErrClosed, while operations may still start (Close's own releases). It is
// safe to call more than once.
func (lt *lifetime) begin() { lt.closingOnce.Do(func() { close(lt.closing) }) }

// close marks the Client closed, runs stop (which ends its waits), then
// waits for every call in flight and stops the workers. It is safe to call
// more than once.
func (lt *lifetime) close(stop func()) {
	lt.begin()
	lt.mu.Lock()
	lt.closed = true
	lt.mu.Unlock()
	stop()
	lt.workers.Close()
}

// heldLocks are a Client's locks obtained and not unlocked, which Close
// releases. Its methods are safe for concurrent use.
type heldLocks struct {
	mu    sync.Mutex
	locks map[*Lock]struct{}
	// sweepAt is the size at which add first drops the locks whose
	// validity has run out, which their callers never unlocked.
	sweepAt int
	// closed is set by releaseAll: from then on add refuses every lock.
	closed bool
}

// add records l, obtained, and returns true, or false once releaseAll
// has begun: the caller must then release l itself.
func (h *heldLocks) add(l *Lock) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	if h.locks == nil {
		h.locks = make(map[*Lock]struct{})
	}
	if len(h.locks) >= h.sweepAt {
		h.sweep(l.c.cfg.clock.Now())
		h.sweepAt = 2*len(h.locks) + 64 // the sweeps cost O(1) per add
	}
	h.locks[l] = struct{}{}
	return true
}

// sweep drops the locks whose validity ended before now. It skips a lock
// busy in another method: that one holds l.mu and may wait for h.mu.
func (h *heldLocks) sweep(now time.Time) {
	for l := range h.locks {
		if l.mu.TryLock() {
			if !now.Before(l.until) {
				delete(h.locks, l)
			}
			l.mu.Unlock()
		}
	}
}

// remove forgets l, unlocked.
func (h *heldLocks) remove(l *Lock) {
	h.mu.Lock()
	delete(h.locks, l)
	h.mu.Unlock()
}

// releaseAll unlocks, in parallel and without handing any over, the locks
// still recorded, and returns once each release has its answer or its
// timeout (Options.NodeTimeout). Their errors are dropped: Close is best
// effort, and a lock that is not released expires with its TTL. Later
// calls of add refuse their locks.
func (h *heldLocks) releaseAll() {
	h.mu.Lock()
	h.closed = true
	locks := make([]*Lock, 0, len(h.locks))
	for l := range h.locks {
		locks = append(locks, l)
	}
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range locks {
		wg.Go(func() { _ = l.unlock(context.Background(), nil, false) })
	}
	wg.Wait()
}
