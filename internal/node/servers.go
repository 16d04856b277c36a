package node

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// SameServerError names two nodes of one client that reach the same Redis
// server, for example under two names (localhost:6379 and 127.0.0.1:6379).
// That server would vote twice toward the quorum.
type SameServerError struct {
	First, Second *Node  // the nodes, in the order they reported the ID
	ID            string // the server's run_id
}

func (e *SameServerError) Error() string {
	return fmt.Sprintf("nodes %s and %s are one server (run_id %.8s)", e.First.name, e.Second.name, e.ID)
}

// Servers tells the servers of one client's nodes apart. The check of each
// new connection of a plain node reports its server's run_id to Servers,
// which keeps each node's latest. A run_id is random, drawn when the process
// starts. So two nodes that report the same one reach the same server.
// The zero value is ready to use, and its methods are safe for concurrent use.
type Servers struct {
	mu  sync.Mutex
	ids map[*Node]string
	err atomic.Pointer[SameServerError] // the first conflict, kept for good
}

// Seen records that n's server has run_id id. It returns a *SameServerError
// when another node's latest ID is id, and keeps the first such error for Err.
func (s *Servers) Seen(n *Node, id string) error {
	if s == nil || id == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ids == nil {
		s.ids = map[*Node]string{}
	}
	s.ids[n] = id
	for m, mid := range s.ids {
		if m != n && mid == id {
			e := &SameServerError{First: m, Second: n, ID: id}
			s.err.CompareAndSwap(nil, e)
			return e
		}
	}
	return nil
}

// Err returns the first conflict that Seen found, or nil.
func (s *Servers) Err() error {
	if s == nil {
		return nil
	}
	if e := s.err.Load(); e != nil {
		return e
	}
	return nil
}
