package wake

import (
	"context"
	"sync"
	"time"
)

// retireWait bounds how long retire waits for a node to confirm that it
// stopped telling the client of handoffs. A node that is down fails the
// unsubscription at once. A slow one is left to its connection's close.
const retireWait = time.Second

// retire closes subs without losing a handoff. subs are the connections of
// a Client that closes, or of keys that went idle. retire first unsubscribes
// the hand channel on each connection and waits, up to retireWait, for the
// node's confirmation. A release hands a key off only to a waiter whose
// client's hand channel has a subscriber on the node. So from the
// confirmation on, the node hands nothing off to the client. The
// announcements of its earlier handoffs came ahead of the confirmation, on
// the same connection. The listener passed those that no waiter expects to
// the stray function, for release. Closing the connection at once would lose
// the announcements still on their way, and their keys would stay held for
// their TTL.
func (w *Waker) retire(subs []*sub) {
	if w.handChannel != "" {
		ctx, cancel := context.WithTimeout(context.Background(), retireWait)
		defer cancel()
		var wg sync.WaitGroup
		for _, s := range subs {
			wg.Go(func() { w.unsubscribeHand(ctx, s) })
		}
		wg.Wait()
	}
	for _, s := range subs {
		_ = s.ps.Close() // ends the listener's Receive
		w.dropHand(s)
	}
}

// unsubscribeHand unsubscribes the hand channel on s for good and waits
// until the node confirmed it, or ctx ends.
func (w *Waker) unsubscribeHand(ctx context.Context, s *sub) {
	s.mu.Lock() // after a subscription under way (see reconcile)
	s.retired = true
	if !s.handOn {
		s.mu.Unlock()
		return // never subscribed: no node knows the client
	}
	confirmed := make(chan struct{})
	w.mu.Lock()
	s.unsubbed = confirmed
	w.mu.Unlock()
	err := s.ps.Unsubscribe(ctx, w.handChannel)
	s.mu.Unlock()
	if err != nil {
		return // the connection is broken: so is the subscription
	}
	select {
	case <-confirmed:
	case <-ctx.Done():
	}
}

// dropHand notes that s, being closed, no longer has the hand channel
// subscribed.
func (w *Waker) dropHand(s *sub) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.handOn {
		s.handOn = false
		w.ledger.subscribedChanged(-1)
	}
}
