package wake

import (
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/clock"
)

// This file holds adapters for redlock until it uses Listen and Ledger.

// oldWaits maps the channels that On and OnSince returned to their Waits.
type oldWaits struct {
	mu sync.Mutex
	m  map[<-chan struct{}][]*Wait
}

// add records wt under its channel, which it returns.
func (o *oldWaits) add(wt *Wait) <-chan struct{} {
	if wt == nil {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[<-chan struct{}][]*Wait{}
	}
	o.m[wt.C()] = append(o.m[wt.C()], wt)
	return wt.C()
}

// take removes and returns one Wait of ch, nil for none.
func (o *oldWaits) take(ch <-chan struct{}) *Wait {
	o.mu.Lock()
	defer o.mu.Unlock()
	ws := o.m[ch]
	if len(ws) == 0 {
		return nil
	}
	if len(ws) == 1 {
		delete(o.m, ch)
	} else {
		o.m[ch] = ws[:len(ws)-1]
	}
	return ws[len(ws)-1]
}

// peek returns one Wait of ch, nil for none.
func (o *oldWaits) peek(ch <-chan struct{}) *Wait {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ws := o.m[ch]; len(ws) > 0 {
		return ws[0]
	}
	return nil
}

// NewLive is [New] with a [Ledger] for the channel live.
func NewLive(nodes []redis.UniversalClient, idle time.Duration, clk clock.Clock, live string) *Waker {
	return New(nodes, idle, clk, NewLedger(live))
}

// On is [Waker.Listen] from a zero time; it returns the Wait's channel.
func (w *Waker) On(key string) <-chan struct{} { return w.OnSince(key, time.Time{}) }

// OnSince is [Waker.Listen]; it returns the Wait's channel.
func (w *Waker) OnSince(key string, since time.Time) <-chan struct{} {
	return w.old.add(w.Listen(key, since))
}

// Done is [Wait.Close] for a channel from On or OnSince.
func (w *Waker) Done(_ string, ch <-chan struct{}) { w.old.take(ch).Close() }

// Next is [Wait.Next] for a channel from On or OnSince, before Done.
func (w *Waker) Next(ch <-chan struct{}) string { return w.old.peek(ch).Next() }

// Expect is [Ledger.Expect].
func (w *Waker) Expect(token, key string) { w.ledger.Expect(token, key) }

// Forget is [Ledger.Forget].
func (w *Waker) Forget(token string) { w.ledger.Forget(token) }

// ForgetSole is [Ledger.ForgetSole].
func (w *Waker) ForgetSole(token string) bool { return w.ledger.ForgetSole(token) }

// Handed is [Ledger.Handed].
func (w *Waker) Handed(token string) int { return w.ledger.Handed(token) }

// HandedNodes is [Ledger.HandedNodes].
func (w *Waker) HandedNodes(token string) uint64 { return w.ledger.HandedNodes(token) }

// Joining is [Ledger.Joining].
func (w *Waker) Joining(key string) (entries, cleared bool) { return w.ledger.Joining(key) }

// Live is [Ledger.Live].
func (w *Waker) Live() bool { return w.ledger.Live() }

// SetStray is [Ledger.SetStray].
func (w *Waker) SetStray(f func(node int, token, key string)) { w.ledger.SetStray(f) }
