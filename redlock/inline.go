package redlock

import (
	"strings"
	"time"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/quorum"
)

// inLine is the WaitInLine strategy, over backoff. A waiter's rounds join
// the line of the first key's waiters on the nodes (inline.lua), and a
// release names the first in line. The waiter named tries at once; the
// others give it a grace to take the keys. A Lock that begins just after an
// announcement that named another client's waiter lets that one go first.
type inLine struct {
	*backoff
}

// refused returns the release that takes a lock's entry off the line. The
// lock's round joined the line on the nodes that refused it. refused reports
// false when the round joined no line. Left there, the entry would let a
// release name a waiter that holds the lock. The other waiters would then
// give it a grace for nothing.
func (s *inLine) refused(h handover) (protocol.Release, bool) {
	if h.join.Place == "" {
		return protocol.Release{}, false
	}
	return protocol.Release{Token: h.Token, Announce: true, Place: h.join.Place}, true
}

// leave takes the waiter with id place off key's line on every node, for
// a Lock call that gave up, after last, its last round, has answered on
// each node (its entry may still be on its way). It does not wait; on a
// closed Client it sends nothing, and the line expires.
func (s *inLine) leave(key, place string, last *quorum.Round) {
	c := s.c
	h := handover{Token: place, Acquire: last, AcquireTimeout: c.callTimeout(), join: protocol.Join{Place: place}}
	c.releaseAside(key, protocol.Release{Keys: []string{c.stored(key)}, Token: place, Announce: true, Place: place}, h)
}

// done takes a waiter that gave up off the line (one that holds the lock
// leaves it with the lock's release, see refused).
func (iw *inLineWait) done(l *Lock) {
	if l == nil && iw.place != "" {
		iw.s.leave(iw.w.keys[0], iw.place, iw.last)
	}
}

// failed notes the calls of the waiter's last round, for leave.
func (iw *inLineWait) failed(_ join, _ time.Duration, calls *quorum.Round) { iw.last = calls }

func (s *inLine) wait() waiting { return &inLineWait{s: s} }

// inLineWait is one Lock call's place in line.
type inLineWait struct {
	w waiter
	s *inLine
	// place is the waiter's id in the line: the token of its first round,
	// "" until then.
	place string
	last  *quorum.Round // the calls of the waiter's last round
}

// sleepHooks let the handoff strategy take part in inLineWait's sleep
// (see sleepWith): handWait passes itself, inLineWait its own, which do
// nothing.
type sleepHooks interface {
	// handedOff reports whether a quorum of nodes handed the keys off.
	handedOff() bool
	// current returns the token of the round that a handoff may name, "".
	current() string
	// heardHand is told of a handoff on a node to a round of this client,
	// and returns the timer to wait for.
	heardHand(timer <-chan time.Time) <-chan time.Time
	// insure is told that the timer fired. It returns a timer to sleep on
	// instead of trying again, or nil to try.
	insure() <-chan time.Time
}

func (iw *inLineWait) handedOff() bool                               { return false }
func (iw *inLineWait) current() string                               { return "" }
func (iw *inLineWait) heardHand(t <-chan time.Time) <-chan time.Time { return t }
func (iw *inLineWait) insure() <-chan time.Time                      { return nil }
func (iw *inLineWait) delay(d time.Duration) time.Duration           { return d }
func (iw *inLineWait) handed(time.Duration) *round                   { return nil }
func (iw *inLineWait) base() *waiter                                 { return &iw.w }

// ticketStep is the resolution of the tickets, in ms. Waiters that began
// within one step are ordered by id; the coarser step lets the Locks of a
// step share their ticket's box (see protocol.Protocol.ticketArg).
const ticketStep = 10

// join returns the place of the waiter's next round in the line: its id
// is the token of its first round, and its ticket the time Lock was
// called, in Unix ms rounded down to ticketStep. A first round has no
// entries to take off; a later one may have (its earlier rounds').
func (iw *inLineWait) join() join {
	ticket := iw.w.began.UnixMilli() / ticketStep * ticketStep
	if iw.place == "" {
		iw.place = protocol.NewToken(iw.w.c.cfg.owner)
		return join{token: iw.place, on: protocol.Join{Place: iw.place, Ticket: ticket}}
	}
	return join{on: protocol.Join{Place: iw.place, Ticket: ticket, Entries: protocol.MayHave}}
}

// first lets the waiter that a release of the key just named as next in
// line go first. This Client may have heard such an announcement less than
// the yield window (tunables.yieldWindow) ago, being still subscribed from
// an earlier wait, typically because it just released the key itself. The
// first round then waits, for the rest of the window, as a waiter woken for
// another would (see sleep). Without it, a client that unlocks and locks
// again at once would usually beat the named waiter, which needs the
// announcement and a round.
func (iw *inLineWait) first() error { return iw.firstWith(iw) }

// firstWith is first, with the handoff's part in its sleep from hooks.
func (iw *inLineWait) firstWith(hooks sleepHooks) error {
	w := &iw.w
	left := iw.s.yieldFor(w.c.stored(w.keys[0]))
	if left <= 0 {
		return nil
	}
	e := &Error{Op: "lock", Key: strings.Join(w.keys, ", "), Quorum: w.c.cfg.quorum, sentinel: ErrNotObtained,
		Reason: "let the waiter of another client named by the last release go first"}
	return iw.sleepWith(hooks, w.c.cfg.clock.After(left), e)
}

// direct takes key as given, and makes its stored form only when a key is
// heard of or listened to: not on an uncontended Client's Lock.
func (s *inLine) direct(key string) bool {
	wk := s.wake
	if !wk.Heard() && wk.Subscribed() == 0 {
		return true
	}
	k := s.c.stored(key)
	return s.yieldFor(k) <= 0 && !wk.Listening(k)
}

// yieldFor returns how long a Lock call that begins now lets another
// client's waiter go first. That waiter is the one the last release of key
// (as stored) named. The time is the rest of the yield window since this
// Client heard that announcement, or 0.
func (s *inLine) yieldFor(key string) time.Duration {
	wk := s.wake
	if !wk.Heard() {
		return 0 // the common case, without a lock or the key's name
	}
	next, at := wk.Named(key)
	if next == "" {
		return 0
	}
	return max(0, s.c.cfg.yieldWindow-s.c.cfg.clock.Now().Sub(at))
}

// sleep waits until timer fires or a node announces the release of the
// keys. An announcement that names this waiter as next in line ends the
// sleep at once; one that names nobody, after a jitter. One that names
// another waiter gives it a grace to take the keys (see grace). The sleep
// then ends at the next announcement or when the grace has passed, so a
// waiter that died or gave up stalls the key no longer than that.
func (iw *inLineWait) sleep(timer <-chan time.Time, last *Error) error {
	return iw.sleepWith(iw, timer, last)
}

// sleepWith is sleep, with the handoff's part in it from hooks.
func (iw *inLineWait) sleepWith(hooks sleepHooks, timer <-chan time.Time, last *Error) error {
	w := &iw.w
	cur := hooks.current()
	key := w.c.stored(w.keys[0])
	since := w.start // nothing listened while the round was out
	// Handoffs to the current round that came while it was out woke no
	// sleep: the ledger has them. Short of a quorum, they get their grace
	// now, as one heard in the sleep would; the timer alone would leave
	// those nodes handed off until it fires, which a node's loss made
	// last up to the doubled MaxRetryDelay.
	timer = hooks.heardHand(timer)
	for {
		if hooks.handedOff() {
			return nil
		}
		if iw.place != "" && iw.s.wake.NamedSince(key, iw.place, w.start) || cur != "" && iw.s.wake.NamedSince(key, cur, w.start) {
			return nil // one of the release's announcements named this waiter, or its current round
		}
		next, woken, err := w.listen(iw.s.wake, timer, since, last)
		if err != nil {
			return err
		}
		if !woken {
			if timer = hooks.insure(); timer == nil {
				return nil
			}
			continue
		}
		since = w.c.cfg.clock.Now()
		switch {
		case next == iw.place || next == cur && cur != "":
			return nil
		case next == "":
			w.jitter()
			return nil
		case strings.HasPrefix(next, protocol.HandPrefix):
			timer = hooks.heardHand(timer)
			continue
		}
		timer = w.c.cfg.clock.After(iw.grace())
	}
}

// grace is how long a waiter lets the waiter named as next in line take
// the key: four times this waiter's last round, enough for the named one's
// round, from 1 ms (tunables.graceFloor) up to Options.NodeTimeout. A first
// round that yields has no round yet: it gives 1 ms.
func (iw *inLineWait) grace() time.Duration {
	cfg := iw.w.c.cfg
	return min(cfg.graceCap, max(cfg.graceFloor, 4*cfg.clock.Now().Sub(iw.w.start)))
}
