package redlock

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/wake"
	"github.com/redquorum/redquorum/quorum"
)

// Waiting is how [Client.Lock] waits between its rounds when the keys are
// taken. Every strategy decides grants with the same scripts on the nodes,
// so Clients with different strategies share keys safely; they differ in
// how soon and in which order waiters try again. See docs/DESIGN.md,
// "Waiting".
type Waiting int

const (
	// WaitDefault is WaitHandoff where it can serve (plain nodes, no
	// Options.Fencing) and WaitInLine elsewhere: it has the best rate and
	// fairness across processes on one busy key (see bench/README.md).
	WaitDefault Waiting = iota
	// WaitBackoff retries after a jittered, doubling delay that an
	// announcement of the key's release on the nodes (pub/sub) cuts short.
	WaitBackoff
	// WaitInLine is WaitBackoff, and the nodes keep the key's waiters in
	// line: each release names the next one, which tries at once while the
	// others give it a grace.
	WaitInLine
	// WaitHandoff is WaitInLine, and a release hands the key off on the
	// node to the next waiter whose Client still listens, without a round
	// of the waiter's. It needs plain nodes (no Cluster, no Ring) and no
	// Options.Fencing.
	WaitHandoff
)

// String returns the constant's name.
func (w Waiting) String() string {
	switch w {
	case WaitDefault:
		return "WaitDefault"
	case WaitBackoff:
		return "WaitBackoff"
	case WaitInLine:
		return "WaitInLine"
	case WaitHandoff:
		return "WaitHandoff"
	}
	return fmt.Sprintf("Waiting(%d)", int(w))
}

// checkWaiting checks Options.Waiting against the other options.
func (c *config) checkWaiting(w Waiting) error {
	switch {
	case w < WaitDefault || w > WaitHandoff:
		return fmt.Errorf("redlock: Options.Waiting %v is not one of WaitDefault, WaitBackoff, WaitInLine, WaitHandoff", w)
	case w == WaitHandoff && c.fencing:
		return fmt.Errorf("redlock: Options.Waiting %v needs the lock that a release hands off to carry no fence: it cannot be used with Options.Fencing (use WaitInLine)", w)
	}
	c.waiting = w
	return nil
}

// strategy is a Client's waiting strategy (Options.Waiting): the one seam
// between the lock rounds, which know nothing of waiting, and the ways to
// wait between them. Lock, round, Client and the release path keep none of
// a strategy's state and reach it only through these methods. The
// strategies are backoff (backoff.go), inLine (inline.go) and handoff
// (handoff.go), each over the one before; see docs/ARCHITECTURE.md.
type strategy interface {
	// wait returns the waiting of one Lock call, with its waiter (one
	// allocation for both).
	wait() waiting
	// refused returns the release (but for its keys) that the release of
	// h sends to a node that refused h's acquire, and false for none: the
	// lock never held the keys there.
	refused(h handover) (protocol.Release, bool)
	// unlocked is told that l is being released.
	unlocked(l *Lock)
	// waker returns the strategy's pub/sub connections to the nodes, on
	// which every wait for a key's release listens (semaphores' and
	// elections' too).
	waker() *wake.Waker
	// direct reports whether a Lock call for key (as given) that begins
	// now, with no other caller of this Client for the key, makes its first
	// round as TryLock does, before it has a waiter. It does when the
	// strategy has no reason to let another client's waiter go first (see
	// inLineWait.first) and this Client did not wait for the key lately.
	// After a refusal the waiter listens for the key. Its new subscription
	// ends the wait once a majority of the nodes confirm it (see
	// wake.Waker.Listen). Its first round joins the line with the direct
	// round's start as its ticket.
	direct(key string) bool
	// close stops the strategy's background work and waits for it.
	close()
}

// waiting is one Lock call's part of its strategy, between its rounds.
type waiting interface {
	// first is called once, before the first round, after the caller's
	// turn in the Client's local queue; it may make the caller wait.
	first() error
	// join returns what the next round tells the strategy on the nodes.
	join() join
	// failed is told that the round of j failed; calls are its acquires.
	failed(j join, ttl time.Duration, calls *quorum.Round)
	// delay returns the wait before the next round, given d, the backoff.
	delay(d time.Duration) time.Duration
	// sleep waits until timer fires, or until the strategy has a reason to
	// try sooner. It returns the error for Lock to return when the caller
	// must give up.
	sleep(timer <-chan time.Time, last *Error) error
	// handed returns the round of a lock that the nodes handed off to
	// this waiter, with ttl, or nil. It may start calls: callers are
	// within c.life.enter.
	handed(ttl time.Duration) *round
	// done is told that the Lock call returns l, or nil when it failed.
	done(l *Lock)
	// base returns the Lock call's waiter.
	base() *waiter
}

// join is what one round of a waiter tells the strategy on the nodes.
type join struct {
	token string        // the round's token; "" for a new one
	on    protocol.Join // the strategy's arguments
	start time.Time     // when the round was sent, when the strategy needs it
}

// newStrategy returns the waiting strategy of c, which waits for
// announcements on the nodes clients.
func (c *Client) newStrategy(clients []redis.UniversalClient) strategy {
	b := &backoff{c: c}
	inLine := &inLine{backoff: b}
	var s strategy
	var ledger *wake.Ledger // nil: no handoffs
	switch {
	case c.cfg.waiting == WaitBackoff:
		s = b
	case c.cfg.waiting == WaitInLine || c.cfg.fencing || c.sharded:
		// A fenced lock needs its round's fence, and a Cluster or a Ring
		// node no script that reaches the node's state: their waiters are
		// only named.
		s = inLine
	default:
		h := &handoff{inLine: inLine, channel: protocol.HandChannel + protocol.NewToken("")}
		c.proto.WithHandChannel(h.channel)
		h.ledger = wake.NewLedger(h.channel, h.releaseStray)
		s, ledger = h, h.ledger
	}
	b.wake = wake.New(clients, c.cfg.wakeIdle, c.cfg.clock, ledger)
	return s
}

// waker returns c's pub/sub connections, which its waiting strategy
// opened.
func (c *Client) waker() *wake.Waker { return c.wait.waker() }
