package redlock

import (
	"sync"

	"github.com/redquorum/redquorum/quorum"
)

// lifetime is a Client's open or closed state and the calls to the nodes
// that outlive the operations that started them.
type lifetime struct {
	// mu is held for reading by every operation that sends to the nodes
	// (a lock attempt with all its rounds, an Unlock, an Extend), for the
	// whole operation; close takes it for writing, so that it waits for
	// them and no call starts once closed is set.
	mu      sync.RWMutex
	closed  bool
	closing chan struct{} // closed when Close begins
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

// close marks the Client closed, runs stop (which ends its waits), then
// waits for every call in flight and stops the workers. It is safe to call
// more than once.
func (lt *lifetime) close(stop func()) {
	lt.mu.Lock()
	if !lt.closed {
		close(lt.closing)
	}
	lt.closed = true
	lt.mu.Unlock()
	stop()
	lt.workers.Close()
}
