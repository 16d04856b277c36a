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
// leaves it with the lock's release, see refused). With a handoff part,
// that part leaves.
func (iw *inLineWait) done(l *Lock) {
	switch {
	case iw.hand != nil:
		iw.hand.done(l)
	case l == nil && iw.place != "":
		iw.s.leave(iw.w.keys[0], iw.place, iw.last)
	}
}

// failed notes the calls of the waiter's last round, for leave, and tells
// the handoff part.
func (iw *inLineWait) failed(j join, ttl time.Duration, calls *quorum.Round) {
	iw.last = calls
	if iw.hand != nil {
		iw.hand.failed(j, ttl, calls)
	}
}

func (s *inLine) wait() waiting { return &inLineWait{s: s} }

// inLineWait is one Lock call's place in line.
type inLineWait struct {
	w waiter
	s *inLine
	// place is the waiter's id in the line: the token of its first round,
	// "" until then.
	place string
	last  *quorum.Round // the calls of the waiter's last round
	// hand is the handoff's part of the wait (WaitHandoff), nil for none.
	hand *handWait
}

// delay is the backoff's d, or the handoff part's.
func (iw *inLineWait) delay(d time.Duration) time.Duration {
	if iw.hand != nil {
		return iw.hand.delay(d)
	}
	return d
}

// handed returns the lock that the nodes handed off to the waiter, from
// the handoff part, or nil.
func (iw *inLineWait) handed(ttl time.Duration) *round {
	if iw.hand != nil {
		return iw.hand.handed(ttl)
	}
	return nil
}

func (iw *inLineWait) base() *waiter { return &iw.w }

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
	var j join
	if iw.place == "" {
		iw.place = protocol.NewToken(iw.w.c.cfg.owner)
		j = join{token: iw.place, on: protocol.Join{Place: iw.place, Ticket: ticket}}
	} else {
		j = join{on: protocol.Join{Place: iw.place, Ticket: ticket, Entries: protocol.MayHave}}
	}
	if iw.hand != nil {
		return iw.hand.join(j)
	}
	return j
}

// first lets the waiter that a release of the key just named as next in
// line go first. This Client may have heard such an announcement less than
// the yield window (tunables.yieldWindow) ago, being still subscribed from
// an earlier wait, typically because it just released the key itself. The
// first round then waits, for the rest of the window, as a waiter woken for
// another would (see sleep). Without it, a client that unlocks and locks
// again at once would usually beat the named waiter, which needs the
// announcement and a round.
func (iw *inLineWait) first() error {
	w := &iw.w
	left := iw.s.yieldFor(w.c.stored(w.keys[0]))
	if left <= 0 {
		return nil
	}
	e := &Error{Op: "lock", Key: strings.Join(w.keys, ", "), Quorum: w.c.cfg.quorum, sentinel: ErrNotObtained,
		Reason: "let the waiter of another client named by the last release go first"}
	return iw.sleep(w.c.cfg.clock.After(left), e)
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
//
// With a handoff part (hw), a quorum of nodes that handed the key off to
// the waiter's current round ends the sleep; a handoff short of a quorum
// gets a grace (see handWait.heardHand); and when the timer fires, the
// part may read the nodes instead of trying (see handWait.insure).
func (iw *inLineWait) sleep(timer <-chan time.Time, last *Error) error {
	w, hw := &iw.w, iw.hand
	var cur string // the round a handoff may name
	if hw != nil {
		cur = hw.current()
		// Handoffs to the current round that came while it was out woke
		// no sleep: the ledger has them. Short of a quorum, they get
		// their grace now, as one heard in the sleep would; the timer
		// alone would leave those nodes handed off until it fires, which
		// a node's loss made last up to the doubled MaxRetryDelay.
		timer = hw.heardHand(timer)
	}
	key := w.c.stored(w.keys[0])
	since := w.start // nothing listened while the round was out
	for {
		if hw != nil && hw.handedOff() {
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
			if hw == nil {
				return nil
			}
			if timer = hw.insure(); timer == nil {
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
			if hw != nil {
				timer = hw.heardHand(timer)
			}
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
