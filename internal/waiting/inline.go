package waiting

import (
	"context"
	"strings"
	"time"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/quorum"
)

// inLine is the InLine strategy, over backoff. A waiter's rounds join the
// line of the first key's waiters on the nodes (inline.lua), and a release
// names the first in line. The waiter named tries at once; the others give
// it a grace to take the keys. A call that begins just after an
// announcement that named another client's waiter lets that one go first.
type inLine struct {
	*backoff
}

// Refused returns the release that takes a lock's entry off the line. The
// lock's round joined the line on the nodes that refused it. Refused
// reports false when the round joined no line. Left there, the entry would
// let a release name a waiter that holds the lock. The other waiters would
// then give it a grace for nothing.
func (s *inLine) Refused(token string, j protocol.Join) (protocol.Release, bool) {
	if j.Place == "" {
		return protocol.Release{}, false
	}
	return protocol.Release{Token: token, Announce: true, Place: j.Place}, true
}

// leave takes the waiter with id place off key's line on every node, for
// a call that gave up, after last, its last round, has answered on each
// node (its entry may still be on its way). It does not wait; on a closed
// Client it sends nothing, and the line expires.
func (s *inLine) leave(key, place string, last *quorum.Round) {
	s.host.ReleaseAside(key, protocol.Release{Keys: []string{s.stored(key)}, Token: place, Announce: true, Place: place}, last, 0)
}

// Done takes a waiter that gave up off the line (one that holds the lock
// leaves it with the lock's release, see Refused). With a handoff part,
// that part leaves.
func (iw *inLineWait) Done(token string) {
	switch {
	case iw.hand != nil:
		iw.hand.done(token)
	case token == "" && iw.place != "":
		iw.s.leave(iw.w.keys[0], iw.place, iw.last)
	}
}

// Failed notes the calls of the waiter's last round, for leave, and tells
// the handoff part.
func (iw *inLineWait) Failed(j Join, ttl time.Duration, calls *quorum.Round) {
	iw.last = calls
	if iw.hand != nil {
		iw.hand.failed(j, ttl, calls)
	}
}

func (s *inLine) Wait(ctx context.Context, keys []string, began time.Time, ctxOnly bool) Wait {
	iw := &inLineWait{s: s}
	iw.w.init(s.backoff, ctx, keys, began, ctxOnly)
	return iw
}

// inLineWait is one lock call's place in line.
type inLineWait struct {
	w Waiter
	s *inLine
	// place is the waiter's id in the line: the token of its first round,
	// "" until then.
	place string
	last  *quorum.Round // the calls of the waiter's last round
	// hand is the handoff's part of the wait (Handoff), nil for none.
	hand *handWait
}

// Delay is the backoff's d, or the handoff part's.
func (iw *inLineWait) Delay(d time.Duration) time.Duration {
	if iw.hand != nil {
		return iw.hand.delay(d)
	}
	return d
}

// Handed returns the lock that the nodes handed off to the waiter, from
// the handoff part, and false for none.
func (iw *inLineWait) Handed(ttl time.Duration) (Hand, bool) {
	if iw.hand != nil {
		return iw.hand.handed(ttl)
	}
	return Hand{}, false
}

func (iw *inLineWait) Waiter() *Waiter { return &iw.w }

// TicketStep is the resolution of the tickets, in ms. Waiters that began
// within one step are ordered by id; the coarser step lets the calls of a
// step share their ticket's box (see protocol.Protocol.ticketArg).
const TicketStep = 10

// ticket returns the waiter's ticket: the time its call began, in Unix ms
// rounded down to TicketStep.
func (iw *inLineWait) ticket() int64 { return iw.w.began.UnixMilli() / TicketStep * TicketStep }

// Join returns the place of the waiter's next round in the line: its id
// is the token of its first round, and its ticket the time the call
// began. A first round has no entries to take off; a later one may have
// (its earlier rounds').
func (iw *inLineWait) Join() Join {
	var j Join
	if iw.place == "" {
		iw.place = protocol.NewToken(iw.s.cfg.Owner)
		j = Join{Token: iw.place, On: protocol.Join{Place: iw.place, Ticket: iw.ticket()}}
	} else {
		j = Join{On: protocol.Join{Place: iw.place, Ticket: iw.ticket(), Entries: protocol.MayHave}}
	}
	if iw.hand != nil {
		return iw.hand.join(j)
	}
	return j
}

// First lets the waiter that a release of the key just named as next in
// line go first. This Client may have heard such an announcement less than
// the yield window (Config.YieldWindow) ago, being still subscribed from
// an earlier wait, typically because it just released the key itself. The
// first round then waits, for the rest of the window, as a waiter woken for
// another would (see Sleep). Without it, a client that unlocks and locks
// again at once would usually beat the named waiter, which needs the
// announcement and a round.
func (iw *inLineWait) First() error {
	w := &iw.w
	left := iw.s.yieldFor(iw.s.stored(w.keys[0]))
	if left <= 0 {
		return nil
	}
	return iw.Sleep(iw.s.cfg.Clock.After(left))
}

// Direct takes key as given, and makes its stored form only when a key is
// heard of or listened to: not on an uncontended Client's Lock.
func (s *inLine) Direct(key string) bool {
	wk := s.wake
	if !wk.Heard() && wk.Subscribed() == 0 {
		return true
	}
	k := s.stored(key)
	return s.yieldFor(k) <= 0 && !wk.Listening(k)
}

// yieldFor returns how long a call that begins now lets another client's
// waiter go first. That waiter is the one the last release of key (as
// stored) named. The time is the rest of the yield window since this
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
	return max(0, s.cfg.YieldWindow-s.cfg.Clock.Now().Sub(at))
}

// Sleep waits until timer fires or a node announces the release of the
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
func (iw *inLineWait) Sleep(timer <-chan time.Time) error {
	w, hw := &iw.w, iw.hand
	var cur string // the round a handoff may name
	if hw != nil {
		cur = hw.current()
		// Handoffs to the current round that came while it was out woke
		// no sleep: the ledger has them. Short of a quorum, they get
		// their grace now, as one heard in the sleep would; the timer
		// alone would leave those nodes handed off until it fires, which
		// a node's loss made last up to the doubled MaxRetry.
		timer = hw.heardHand(timer)
	}
	key := iw.s.stored(w.keys[0])
	since := w.start // nothing listened while the round was out
	for {
		if hw != nil && hw.handedOff() {
			return nil
		}
		if iw.place != "" && iw.s.wake.NamedSince(key, iw.place, w.start) || cur != "" && iw.s.wake.NamedSince(key, cur, w.start) {
			return nil // one of the release's announcements named this waiter, or its current round
		}
		next, woken, err := w.listen(iw.s.wake, timer, since)
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
		since = iw.s.cfg.Clock.Now()
		switch {
		case next == iw.place || next == cur && cur != "":
			return nil
		case next == "":
			w.Jitter()
			return nil
		case strings.HasPrefix(next, protocol.HandPrefix):
			if hw != nil {
				timer = hw.heardHand(timer)
			}
			continue
		}
		timer = iw.s.cfg.Clock.After(iw.grace())
	}
}

// grace is how long a waiter lets the waiter named as next in line take
// the key: four times this waiter's last round, enough for the named one's
// round, from Config.GraceFloor up to Config.GraceCap. A first round that
// yields has no round yet: it gives the floor.
func (iw *inLineWait) grace() time.Duration {
	cfg := &iw.s.cfg
	return min(cfg.GraceCap, max(cfg.GraceFloor, 4*cfg.Clock.Now().Sub(iw.w.start)))
}
