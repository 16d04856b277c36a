package waiting

import (
	"context"
	"math/bits"
	"strings"
	"sync"
	"time"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/wake"
	"github.com/redquorum/redquorum/quorum"
)

// handoff is the Handoff strategy, over inLine. A waiter for one key
// joins the line for a handoff on the node (handoff.lua), with its
// Client's hand channel. On that channel each node tells the Client when
// it handed the key off to one of the waiter's rounds. The waiter holds
// the lock once a quorum of nodes did. See docs/WAITING.md, "(c) Handoff
// on the node".
type handoff struct {
	*inLine
	channel string       // the Client's hand channel (protocol.HandChannel and an id)
	ledger  *wake.Ledger // what the nodes told on channel

	mu sync.Mutex
	// sole holds the hand values of the locks that the nodes handed off
	// to their waiter's only round, until their Unlock (see Unlocked).
	sole map[string]struct{}
}

// Wait returns the in-line wait of one lock call with its handoff part,
// in one allocation.
func (h *handoff) Wait(ctx context.Context, keys []string, began time.Time, ctxOnly bool) Wait {
	b := &struct {
		inLineWait
		hand handWait
	}{inLineWait: inLineWait{s: h.inLine}, hand: handWait{h: h}}
	b.inLineWait.hand, b.hand.iw = &b.hand, &b.inLineWait
	b.w.init(h.backoff, ctx, keys, began, ctxOnly)
	return &b.inLineWait
}

// Refused is for a lock whose round joined the line for a handoff on the
// nodes that refused it, where a release may have handed the key off to
// that round. It returns the release of what was handed off there, which
// also takes the Client's entries off the line. The release leaves no
// tombstones: the round's acquire was answered.
func (h *handoff) Refused(token string, j protocol.Join) (protocol.Release, bool) {
	if j.Channel == "" || strings.HasPrefix(token, protocol.HandPrefix) {
		return protocol.Release{}, false
	}
	return protocol.Release{Token: token, Announce: true, Leave: true}, true
}

// Unlocked forgets the handoffs to the round of the lock of token, when
// the nodes handed it off. A slow node may hand the key off to that round
// only after this release passed there. From now on, an announcement of
// such a handoff is stray (see releaseStray). A handoff that this release
// overtakes is released twice, harmlessly.
func (h *handoff) Unlocked(token string) {
	hand, ok := strings.CutPrefix(token, protocol.HandPrefix)
	if !ok {
		return
	}
	h.mu.Lock()
	_, sole := h.sole[token]
	delete(h.sole, token)
	h.mu.Unlock()
	// With sole, every node that handed it off took its round's entry off
	// the line: if all did, the Client's next waiter for the key need not
	// look for its entries (see protocol.Cleared).
	h.ledger.Forget(hand, sole)
}

// Channel, Ledger, Sole and ReleaseStray make handoff a Handoffs.
func (h *handoff) Channel() string { return h.channel }

func (h *handoff) Ledger() *wake.Ledger { return h.ledger }

func (h *handoff) Sole(token string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.sole[token]
	return ok
}

func (h *handoff) ReleaseStray(node int, token, key string) { h.releaseStray(node, token, key) }

// handWait is the handoff's part of one lock call's wait in line (iw): its
// wait for a handoff on the node.
type handWait struct {
	iw *inLineWait
	h  *handoff
	// hands holds the tokens of the failed rounds that joined the line for
	// a handoff, the last one current. curStart is when that one was sent,
	// and curCalls its calls. gotHand is set once a quorum of nodes
	// announced a handoff to it. ttl is the lock's.
	hands    []string
	reads    int  // reads of the nodes that found nothing to mend (see insure)
	moving   bool // the last read found a handoff on its way
	curStart time.Time
	curCalls *quorum.Round
	gotHand  bool
	ttl      time.Duration
	// expected is set once a round joined for a handoff: the ledger
	// expects it until the waiter is done; stored is the key as stored.
	expected bool
	stored   string
}

// join adds to j, what the in-line wait's next round tells the nodes, the
// handoff's part for a waiter for one key once the Client's hand channel is
// subscribed (from its first wait for any key on). Each round then joins
// under its own token, made here, replacing the previous round's entry. A
// release may then set the key to that token (with protocol.HandPrefix)
// instead of deleting it.
func (hw *handWait) join(j Join) Join {
	w, h := &hw.iw.w, hw.h
	if len(w.keys) != 1 || !h.ledger.Subscribed() {
		return j
	}
	if hw.stored == "" {
		hw.stored = h.stored(w.keys[0])
	}
	j.On.Channel, j.Start = h.channel, h.cfg.Clock.Now()
	if j.Token != "" { // the first round
		switch entries, cleared := h.ledger.Joining(hw.stored); {
		case entries:
			j.On.Entries = protocol.MayHave
		case cleared:
			j.On.Entries = protocol.Cleared
		}
	} else {
		j.Token = protocol.NewToken(h.cfg.Owner)
	}
	j.On.Prev = hw.current()
	h.ledger.Expect(j.Token, hw.stored)
	hw.expected = true
	return j
}

// failed notes that the round of j failed: if it joined for a handoff, a
// release may hand the key off to its token from now on.
func (hw *handWait) failed(j Join, ttl time.Duration, calls *quorum.Round) {
	if j.On.Channel == "" {
		return
	}
	hw.curCalls = calls
	if j.On.Prev != "" {
		// The round took the previous one's entries off the line: a
		// handoff to that one now is stray (see releaseStray).
		hw.h.drop(j.On.Prev)
	}
	hw.hands = append(hw.hands, j.Token)
	hw.curStart, hw.ttl = j.Start, ttl
}

// delay is the backoff's d until the waiter is in line for a handoff.
// Then it is Config.MaxRetry, doubled for each earlier round that joined
// and each read of the nodes that found nothing to mend (see insure), up
// to a quarter of the lock's TTL (or MaxRetry, if more). The key comes to
// the waiter in its turn, and an earlier round would only find it taken:
// the timer is for a lost handoff or announcement. With a flat period,
// every waiter in line would send a round each MaxRetry, each scanning
// the whole line: work quadratic in the line's length per acquisition. A
// quarter of the TTL keeps the current round young enough for its handoff
// to leave more than half the TTL (see handed).
func (hw *handWait) delay(d time.Duration) time.Duration {
	if hw.current() == "" {
		return d
	}
	cfg := &hw.h.cfg
	limit := max(cfg.MaxRetry, hw.ttl/4)
	wait := cfg.MaxRetry
	for i := 1; i < len(hw.hands)+hw.reads && wait < limit; i++ {
		wait *= 2
	}
	return min(wait, limit)
}

// current returns the token of the waiter's last round that joined for a
// handoff, "" for none.
func (hw *handWait) current() string {
	if len(hw.hands) == 0 {
		return ""
	}
	return hw.hands[len(hw.hands)-1]
}

// handedOff reports whether a quorum of nodes announced that they handed
// the key off to the current round, and notes it for handed.
func (hw *handWait) handedOff() bool {
	cur := hw.current()
	hw.gotHand = hw.gotHand || cur != "" && bits.OnesCount64(hw.h.ledger.HandedNodes(cur)) >= hw.h.cfg.Quorum
	return hw.gotHand
}

// heardHand is told of a handoff to a round of this Client. When some
// nodes, short of a quorum, handed the key off to the current round, the
// others may follow within a grace. It then returns a timer for the grace,
// after which a round takes what was handed off as its own; else timer. A
// handoff to an earlier round of this waiter changes nothing here: the
// current round took it over, or it is released as stray.
func (hw *handWait) heardHand(timer <-chan time.Time) <-chan time.Time {
	cur := hw.current()
	if cur != "" && hw.h.ledger.HandedNodes(cur) != 0 && !hw.handedOff() {
		cfg := &hw.h.cfg
		return cfg.Clock.After(min(hw.iw.grace(), cfg.YieldWindow))
	}
	return timer
}

// handed returns the lock that a quorum of nodes handed off to the
// current round, and false for none. Each of those nodes set the key for ttl after
// the round's entry reached it, so after the round was sent. The validity
// is thus measured from the round's start, as for any round. With less
// than half the ttl left, it returns none: the next round counts the
// handed keys as its own (protocol.Join.Prev) and makes a lock of the
// full ttl. See docs/SAFETY.md, "The handoff on the node keeps mutual
// exclusion".
func (hw *handWait) handed(ttl time.Duration) (Hand, bool) {
	if !hw.gotHand {
		return Hand{}, false
	}
	hw.gotHand = false
	w, h := &hw.iw.w, hw.h
	now := h.cfg.Clock.Now()
	validity := clock.Validity(ttl, now.Sub(hw.curStart), h.cfg.Drift)
	if validity < ttl/2 {
		return Hand{}, false
	}
	tok := hw.current()
	hand := Hand{Token: protocol.HandPrefix + tok, Start: hw.curStart, Until: now.Add(validity),
		Join:  protocol.Join{Place: hw.iw.place, Ticket: hw.iw.ticket(), Channel: h.channel, Prev: tok, Entries: protocol.MayHave},
		Nodes: h.ledger.HandedNodes(tok), Last: hw.curCalls}
	if w.attempts == 1 && len(hw.hands) == 1 && tok == hw.iw.place {
		h.mu.Lock()
		if h.sole == nil {
			h.sole = map[string]struct{}{}
		}
		h.sole[hand.Token] = struct{}{}
		h.mu.Unlock()
	}
	return hand, true
}

// done forgets the waiter's rounds that joined for a handoff. The ledger
// expects every round that joined: the first (whose token is the waiter's
// place), the failed ones, and the one that obtained the lock (of token;
// "" when the call failed). done forgets them all, but for a lock handed
// off on the nodes, which its Unlock forgets. A handoff to a forgotten
// round is stray, released when announced (see releaseStray).
//
// A waiter that gave up leaves the line: one release of its current round
// takes the Client's entries for the key off each line, and releases the
// key where a node handed it off to that round. A waiter that holds the
// lock leaves nothing: each of its rounds replaced the previous one's
// entries, and the lock's round took its own off (a handoff popped them,
// or Refused releases them with the lock). An earlier round's entry that
// a later one missed is stray when handed off, or taken off by the
// Client's next first round for the key (protocol.MayHave).
//
// A node that announced a handoff to a round before the waiter forgot it
// still holds the key for that round: done releases it, as stray (see
// handoff.drop), but for the lock's own round and a current round that
// the leave releases.
func (hw *handWait) done(lockToken string) {
	failed := lockToken == ""
	cur := hw.current()
	if hw.expected {
		for _, t := range append(hw.hands, hw.iw.place, lockToken) {
			switch {
			case lockToken == protocol.HandPrefix+t:
			case t == lockToken || failed && t == cur:
				hw.h.ledger.Forget(t, false)
			default:
				hw.h.drop(t)
			}
		}
	}
	if failed && cur != "" {
		hw.h.leave(hw.iw.w.keys[0], cur, hw.ttl)
	}
}

// leave takes the round with token of a waiter for key off the key's line
// on every node. Where a release handed the key off to that round, it
// releases (and hands off) the key (see handWait.done). It does not wait.
// On a closed Client it sends nothing: the entries and the keys expire.
func (h *handoff) leave(key, token string, ttl time.Duration) {
	h.host.ReleaseAside(key, protocol.Release{Keys: []string{h.stored(key)}, Token: token, Announce: true, Leave: true}, nil, ttl)
}

// drop forgets the waiter's round with token, and releases the key where
// a node announced a handoff to that round before: no announcement will
// come again to release it as stray, and without this the key would stay
// handed off to a round that nobody expects until its TTL ran out, stalling
// every waiter. A later round that took the key over there (it counts the
// previous round's hand value as free) holds it under its own token, which
// the release leaves alone. The releases go in the background; on a closed
// Client none is sent.
func (h *handoff) drop(token string) {
	nodes, key := h.ledger.Drop(token)
	if nodes == 0 {
		return
	}
	if err := h.host.Enter(); err != nil {
		return // closed: the handoffs expire
	}
	defer h.host.Exit()
	h.host.Start(context.Background(), h.cfg.NodeTimeout, func(ctx context.Context, i int) error {
		if nodes&(1<<i) == 0 {
			return nil
		}
		return h.releaseHand(ctx, i, token, key)
	})
}

// releaseStray releases key (as stored) on node i, where a release handed
// it off to the round with token. No waiter of this Client expects that
// round any more (see wake.NewLedger): it obtained the lock, or gave up,
// while its entry was still in the node's line. The release hands the key
// off to the next in line, and takes off only that hand value. The handoff
// popped the round's entry, and a Client entry left belongs to its current
// waiter, which this release may reach after the key was freed. It runs
// also while the Client closes: nodes may announce such handoffs until
// Close has unsubscribed the hand channel. The Waker's Close waits for it,
// before the node clients close (see wake.Waker.Close).
func (h *handoff) releaseStray(i int, token, key string) {
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.NodeTimeout)
	defer cancel()
	_ = h.releaseHand(ctx, i, token, key)
}

// releaseHand releases key (as stored) on node i where it holds the hand
// value of the round with token, and hands it off to the next in line.
func (h *handoff) releaseHand(ctx context.Context, i int, token, key string) error {
	cmd := h.cfg.Proto.Release(protocol.Release{Keys: []string{key}, Token: protocol.HandPrefix + token, Announce: true})
	return h.host.Release(ctx, i, cmd, key)
}
