package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/queue"
	"github.com/redquorum/redquorum/internal/retry"
	"github.com/redquorum/redquorum/quorum"
)

// waiter is how [Client.Lock] waits between its rounds: first for its turn
// in the Client's local queue for the keys, then, after each failed round,
// a jittered backoff that a release announcement cuts short, within the
// caller's deadline or Options.MaxWait.
type waiter struct {
	c        *Client
	ctx      context.Context
	keys     []string
	turn     *queue.Turn[handover] // nil until the first next
	attempts int                   // rounds failed so far
	obtained bool
	start    time.Time // of the last round
	giveUp   <-chan time.Time
	// giveUpAt is when to give up if ctx has no deadline: the timer is
	// made only when Lock has to wait (an allocation saved per call).
	giveUpAt    time.Time
	hasDeadline bool
	began       time.Time // when Lock was called
	// place is this caller's id in the key's queue of waiters on the
	// nodes (see join); "" until its first round.
	place string
	// For handoffs on the node (see join): hands holds the tokens of the
	// failed rounds that joined the key's queue for one, the last one
	// current; curStart is when that one was sent, handed is set once a
	// quorum of nodes announced a handoff to it, ttl is the lock's, and
	// lockToken the token of the lock obtained.
	hands     []string
	curStart  time.Time
	curCalls  *quorum.Round // the current round's calls
	handed    bool
	ttl       time.Duration
	lockToken string
	// expected is set once a round joined for a handoff: the Waker
	// expects it until the waiter is done (see leave); stored is the key
	// as stored.
	expected bool
	stored   string
}

func (c *Client) newWaiter(ctx context.Context, keys []string) waiter {
	_, hasDeadline := ctx.Deadline()
	now := c.cfg.clock.Now()
	return waiter{c: c, ctx: ctx, keys: keys, hasDeadline: hasDeadline, began: now, giveUpAt: now.Add(c.cfg.maxWait)}
}

// giveUpChan returns a channel that fires once Options.MaxWait has passed
// since the waiter began, or nil when ctx has a deadline.
func (w *waiter) giveUpChan() <-chan time.Time {
	if w.giveUp == nil && !w.hasDeadline {
		clk := w.c.cfg.clock
		w.giveUp = clk.After(w.giveUpAt.Sub(clk.Now()))
	}
	return w.giveUp
}

// next waits for the next chance to try. The first call waits for the
// caller's turn in the local queue and returns the lock handed over with
// the turn, if any. Each later call follows a failed round, whose error is
// last and which reported the holder's keys free in hint (0: unknown); it
// waits a random delay between Options.MinRetryDelay and a cap that
// doubles up to Options.MaxRetryDelay, or until hint when that is sooner,
// or until a node announces the keys' release. It returns an error for
// Lock to return when the caller must give up: ctx ended, MaxWait passed,
// or the Client was closed (at once, not at the next round).
func (w *waiter) next(last *Error, hint time.Duration) (handover, error) {
	if w.turn == nil {
		h, err := w.queued()
		if err == nil && h.Token == "" {
			err = w.yield()
		}
		return h, err
	}
	if err := ctxEnded(w.ctx); err != nil {
		// The context ended during the round, perhaps after its decision.
		last.ctx = err
		return handover{}, last
	}
	cfg := w.c.cfg
	wait := retry.Delay(w.attempts, cfg.minRetry, cfg.maxRetry)
	w.attempts++
	if w.current() != "" {
		// In the queue for a handoff, with the client's channel in place:
		// the key comes to this waiter in its turn, and a round before
		// then would only find it taken. The timer is for a handoff or an
		// announcement that got lost.
		wait = cfg.maxRetry
	}
	if hint > 0 && hint < wait {
		// Come back when the holder's keys expire, spread a little so that
		// waiters do not arrive in step.
		wait = hint + retry.Jitter(min(cfg.minRetry, hint/4))
	}
	if err := w.sleep(cfg.clock.After(wait), last); err != nil {
		return handover{}, err
	}
	w.start = cfg.clock.Now()
	return handover{}, nil
}

// join returns the place of the waiter's next round in the key's queue of
// waiters on the nodes: its id is the token of its first round, and its
// ticket the time Lock was called, in Unix ms rounded down to ticketStep.
//
// A waiter for one key of a Client that takes handoffs (Client.live), once
// the Client's channel is subscribed (from its first wait for any key on),
// joins for a handoff on the node: each round joins under its own token, made
// here, replacing the previous round's entry, so that a release may set
// the key to that token (with protocol.HandPrefix) instead of deleting it
// (see release.lua). The waiter holds the lock once a quorum of nodes has
// announced such a handoff to its current round (see sleep and
// handedLock).
func (w *waiter) join() join {
	ticket := w.ticket()
	j := join{place: w.place, ticket: ticket, queued: true}
	if w.place == "" {
		// The first round: its id is new, so only the Client's earlier
		// waiters for the key can have left entries, and only if it waited
		// for the key lately.
		w.place = protocol.NewToken(w.c.cfg.owner)
		j = join{place: w.place, ticket: ticket, first: true}
	}
	if w.c.live != "" && len(w.keys) == 1 && w.c.wake.Live() {
		j.live, j.start, j.token = w.c.live, w.c.cfg.clock.Now(), w.place
		if w.stored == "" {
			w.stored = w.c.stored(w.keys[0])
		}
		if j.first {
			j.queued, j.cleared = w.c.wake.Joining(w.stored)
		} else {
			j.token = protocol.NewToken(w.c.cfg.owner)
		}
		j.prev = w.current()
		w.c.wake.Expect(j.token, w.stored)
		w.expected = true
	}
	return j
}

// joined notes that the round of j failed: if it joined for a handoff, a
// release may hand the key over to its token from now on.
func (w *waiter) joined(j join, ttl time.Duration, calls *quorum.Round) {
	if j.live == "" {
		return
	}
	w.curCalls = calls
	if j.prev != "" {
		// The round took the previous one's entries off the queue: a
		// handoff to that one now is stray (see Client.releaseStray).
		w.c.wake.Forget(j.prev)
	}
	w.hands = append(w.hands, j.token)
	w.curStart, w.ttl = j.start, ttl
}

// current returns the token of the waiter's last round that joined for a
// handoff, "" for none.
func (w *waiter) current() string {
	if len(w.hands) == 0 {
		return ""
	}
	return w.hands[len(w.hands)-1]
}

// handedOver reports whether a quorum of nodes announced that they handed
// the key over to the current round, and notes it for handedLock.
func (w *waiter) handedOver() bool {
	cur := w.current()
	w.handed = w.handed || cur != "" && w.c.wake.Handed(cur) >= w.c.cfg.quorum
	return w.handed
}

// handedLock returns the lock that a quorum of nodes handed over to the
// current round, or nil. Each of those nodes set the key for ttl after
// the round's entry reached it, so after the round was sent: the
// validity is measured from then, as for a round sent then. When less
// than half the ttl is left, it returns nil: the next round, which counts
// the handed keys as its own (join.prev), makes a lock of the full ttl.
func (w *waiter) handedLock(ttl time.Duration) *Lock {
	if !w.handed {
		return nil
	}
	w.handed = false
	c := w.c
	now := c.cfg.clock.Now()
	validity := clock.Validity(ttl, now.Sub(w.curStart), c.cfg.drift)
	if validity < ttl/2 {
		return nil
	}
	tok := w.current()
	j := join{place: w.place, ticket: w.ticket(), live: c.live, prev: tok, queued: true}
	r := c.handedRound(w.keys, ttl, protocol.HandPrefix+tok, w.curStart, now.Add(validity), j)
	r.sole = w.attempts == 1 && len(w.hands) == 1 && tok == w.place
	c.topUp(r, c.wake.HandedNodes(tok), w.curCalls)
	return newLock(r)
}

// ticket is the waiter's ticket in the queue: when Lock was called, in
// Unix ms rounded down to ticketStep.
func (w *waiter) ticket() int64 { return w.began.UnixMilli() / ticketStep * ticketStep }

// ticketStep is the resolution of the tickets, in ms. Waiters that began
// within one step are ordered by id; the coarser step lets the Locks of a
// step share their ticket's box (see protocol.Protocol.ticketArg).
const ticketStep = 10

// sleep waits until timer fires or a node announces the release of the
// keys. An announcement that names this waiter as next in line ends the
// sleep at once; one that names nobody, after a jitter (see jitter); one
// that names another waiter gives that one a grace to take the keys (see
// grace): the sleep then ends at the next announcement, or when the grace
// has passed, so that a waiter that died or gave up stalls the key no
// longer than that. It returns the error for
// Lock to return when the caller must give up.
func (w *waiter) sleep(timer <-chan time.Time, last *Error) error {
	cfg := w.c.cfg
	key := w.c.stored(w.keys[0])
	cur := w.current()
	since := w.start // nothing listened while the round was out
	for {
		if w.handedOver() {
			return nil
		}
		wake := w.c.wake.OnSince(key, since) // closed when a node announces the key's release
		var next string
		select {
		case <-timer:
			w.c.wake.Done(key, wake)
			return nil
		case <-wake:
			next = w.c.wake.Next(wake)
		case <-w.ctx.Done():
			w.c.wake.Done(key, wake)
			last.ctx = w.ctx.Err()
			return last
		case <-w.giveUpChan():
			w.c.wake.Done(key, wake)
			last.Reason = joinReason(last.Reason, fmt.Sprintf("gave up after Options.MaxWait %v", cfg.maxWait))
			return last
		case <-w.c.life.closing:
			w.c.wake.Done(key, wake)
			return ErrClosed
		}
		w.c.wake.Done(key, wake)
		since = cfg.clock.Now()
		switch {
		case next == w.place || next == cur && cur != "":
			return nil
		case next == "":
			w.jitter(cfg.clock.Now().Sub(w.start))
			return nil
		case strings.HasPrefix(next, protocol.HandPrefix):
			if cur != "" && w.c.wake.Handed(cur) > 0 && !w.handedOver() {
				// Handed over by some nodes so far: the others' may follow
				// within a grace, after which a round takes what was
				// handed over as its own.
				timer = cfg.clock.After(min(w.grace(), cfg.yieldWindow))
			}
			// (A handoff is told only to its waiter's client: one to an
			// earlier round of this waiter, which the current round took
			// over or which is released as stray, changes nothing here.)
			continue
		}
		timer = cfg.clock.After(w.grace())
	}
}

// grace is how long a waiter lets the waiter named as next in line take
// the key: four times this waiter's last round, enough for the named one's
// round, from 1 ms (tunables.graceFloor) up to Options.NodeTimeout. A first
// round that yields has no round yet: it gives 1 ms.
func (w *waiter) grace() time.Duration {
	cfg := w.c.cfg
	return min(cfg.handoffGrace, max(cfg.graceFloor, 4*cfg.clock.Now().Sub(w.start)))
}

// yield lets the waiter that a release of the key just named as next in
// line go first: when this Client heard such an announcement less than
// the yield window ago (tunables.yieldWindow) (it is still subscribed to the key from an earlier wait,
// typically because it has just released the key itself), the first round
// waits as a waiter woken for another would (see sleep), for the rest of
// the window. Without it, a client that unlocks and locks again at once
// would usually beat the named waiter, which needs the announcement and a
// round.
func (w *waiter) yield() error {
	if !w.c.wake.Heard() {
		return nil // the common case, without a lock or the key's name
	}
	next, at := w.c.wake.Named(w.c.stored(w.keys[0]))
	if next == "" {
		return nil
	}
	left := w.c.cfg.yieldWindow - w.c.cfg.clock.Now().Sub(at)
	if left <= 0 {
		return nil
	}
	e := &Error{Op: "lock", Key: strings.Join(w.keys, ", "), Quorum: w.c.cfg.quorum, sentinel: ErrNotObtained,
		Reason: "let the waiter of another client named by the last release go first"}
	err := w.sleep(w.c.cfg.clock.After(left), e)
	w.start = w.c.cfg.clock.Now()
	return err
}

// queued waits for the caller's turn in the local queue.
func (w *waiter) queued() (handover, error) {
	t, prev, err := w.c.queue.Wait(w.ctx, strings.Join(w.keys, "\x00"), w.giveUpChan)
	w.start = w.c.cfg.clock.Now()
	if err == nil {
		w.turn = t
		return prev, nil
	}
	if prev.Token != "" {
		// A lock was handed over to this caller as it gave up, and no
		// other caller of this Client waits for it: release it.
		w.c.releaseUnclaimed(w.keys, prev)
	}
	if errors.Is(err, queue.ErrClosed) {
		return prev, ErrClosed
	}
	e := &Error{Op: "lock", Key: strings.Join(w.keys, ", "), Quorum: w.c.cfg.quorum, sentinel: ErrNotObtained,
		Reason: "waited behind other callers of this Client for the key"}
	if errors.Is(err, queue.ErrGaveUp) {
		e.Reason = joinReason(e.Reason, fmt.Sprintf("gave up after Options.MaxWait %v", w.c.cfg.maxWait))
	} else {
		e.ctx = err
	}
	return prev, e
}

// jitter waits a random moment of up to one round's duration (and at most
// MinRetryDelay) after a wake, so that clients in separate processes woken
// by the same message do not all send their rounds at once and split the
// nodes' votes: spread over a round's duration, the first to arrive usually
// finds the nodes free and the others find them taken.
func (w *waiter) jitter(round time.Duration) {
	if d := retry.Jitter(min(round, w.c.cfg.minRetry)); d > 0 {
		<-w.c.cfg.clock.After(d)
	}
}

// held hands the turn to l, which keeps it until Unlock or its expiry.
func (w *waiter) held(l *Lock) {
	w.obtained, w.lockToken = true, l.token
	l.turn = w.turn
	w.c.queue.Held(w.turn, l.Until())
}

// leave gives the turn up unless a lock holds it, and takes the waiter's
// rounds that joined for a handoff, but for the lock's, off the key's
// queue, releasing (and handing on) what a node may have handed over to
// them.
func (w *waiter) leave() {
	if !w.obtained {
		w.c.queue.Leave(w.turn)
	}
	if w.expected {
		// The Waker expects every round that joined for a handoff: the
		// first (whose token is the waiter's place), the failed ones, and
		// the one that obtained the lock. A lock handed over on the nodes
		// is forgotten by its Unlock.
		for _, t := range append(w.hands, w.place, w.lockToken) {
			if w.lockToken != protocol.HandPrefix+t {
				w.c.wake.Forget(t)
			}
		}
	}
	for _, t := range w.hands {
		if w.lockToken != protocol.HandPrefix+t {
			w.c.leaveHandoff(w.keys[0], t, w.ttl)
		}
	}
}

// joinReason joins two reasons, either of which may be empty, with "; ".
func joinReason(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
