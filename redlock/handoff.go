package redlock

import (
	"context"
	"math/bits"
	"strings"
	"sync"
	"time"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/alloc"
	"github.com/redquorum/redquorum/internal/node"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/wake"
	"github.com/redquorum/redquorum/quorum"
)

// handoff is the WaitHandoff strategy, over inLine. A waiter for one key
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
	// to their waiter's only round, until their Unlock (see unlocked).
	sole map[string]struct{}
}

// wait returns the in-line wait of one Lock call with its handoff part,
// in one allocation.
func (h *handoff) wait() waiting {
	b := &struct {
		inLineWait
		hand handWait
	}{inLineWait: inLineWait{s: h.inLine}, hand: handWait{h: h}}
	b.inLineWait.hand, b.hand.iw = &b.hand, &b.inLineWait
	return &b.inLineWait
}

// refused is for a lock whose round joined the line for a handoff on the
// nodes that refused it, where a release may have handed the key off to
// that round. It returns the release of what was handed off there, which
// also takes the Client's entries off the line. The release leaves no
// tombstones: the round's acquire was answered.
func (h *handoff) refused(hd handover) (protocol.Release, bool) {
	if hd.join.Channel == "" || strings.HasPrefix(hd.Token, protocol.HandPrefix) {
		return protocol.Release{}, false
	}
	return protocol.Release{Token: hd.Token, Announce: true, Leave: true}, true
}

// unlocked forgets the handoffs to the round of l, when the nodes handed
// l off. A slow node may hand the key off to that round only after this
// release passed there. From now on, an announcement of such a handoff is
// stray (see releaseStray). A handoff that this release overtakes is
// released twice, harmlessly.
func (h *handoff) unlocked(l *Lock) {
	hand, ok := strings.CutPrefix(l.token, protocol.HandPrefix)
	if !ok {
		return
	}
	h.mu.Lock()
	_, sole := h.sole[l.token]
	delete(h.sole, l.token)
	h.mu.Unlock()
	// With sole, every node that handed it off took its round's entry off
	// the line: if all did, the Client's next waiter for the key need not
	// look for its entries (see protocol.Cleared).
	h.ledger.Forget(hand, sole)
}

// handWait is the handoff's part of one Lock call's wait in line (iw): its
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
func (hw *handWait) join(j join) join {
	w, h := &hw.iw.w, hw.h
	if len(w.keys) != 1 || !h.ledger.Subscribed() {
		return j
	}
	if hw.stored == "" {
		hw.stored = w.c.stored(w.keys[0])
	}
	j.on.Channel, j.start = h.channel, w.c.cfg.clock.Now()
	if j.token != "" { // the first round
		switch entries, cleared := h.ledger.Joining(hw.stored); {
		case entries:
			j.on.Entries = protocol.MayHave
		case cleared:
			j.on.Entries = protocol.Cleared
		}
	} else {
		j.token = protocol.NewToken(w.c.cfg.owner)
	}
	j.on.Prev = hw.current()
	h.ledger.Expect(j.token, hw.stored)
	hw.expected = true
	return j
}

// failed notes that the round of j failed: if it joined for a handoff, a
// release may hand the key off to its token from now on.
func (hw *handWait) failed(j join, ttl time.Duration, calls *quorum.Round) {
	if j.on.Channel == "" {
		return
	}
	hw.curCalls = calls
	if j.on.Prev != "" {
		// The round took the previous one's entries off the line: a
		// handoff to that one now is stray (see releaseStray).
		hw.h.drop(j.on.Prev)
	}
	hw.hands = append(hw.hands, j.token)
	hw.curStart, hw.ttl = j.start, ttl
}

// delay is the backoff's d until the waiter is in line for a handoff.
// Then it is Options.MaxRetryDelay, doubled for each earlier round that
// joined and each read of the nodes that found nothing to mend (see
// insure), up to a quarter of the lock's TTL (or MaxRetryDelay, if more).
// The key comes to the waiter in its turn, and an earlier round would only
// find it taken: the timer is for a lost handoff or announcement. With a
// flat period, every waiter in line would send a round each MaxRetryDelay,
// each scanning the whole line: work quadratic in the line's length per
// acquisition. A quarter of the TTL keeps the current round young enough
// for its handoff to leave more than half the TTL (see handed).
func (hw *handWait) delay(d time.Duration) time.Duration {
	if hw.current() == "" {
		return d
	}
	cfg := hw.iw.w.c.cfg
	limit := max(cfg.maxRetry, hw.ttl/4)
	wait := cfg.maxRetry
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
	hw.gotHand = hw.gotHand || cur != "" && bits.OnesCount64(hw.h.ledger.HandedNodes(cur)) >= hw.iw.w.c.cfg.quorum
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
		cfg := hw.iw.w.c.cfg
		return cfg.clock.After(min(hw.iw.grace(), cfg.yieldWindow))
	}
	return timer
}

// handed returns the round of the lock that a quorum of nodes handed off
// to the current round, or nil. Each of those nodes set the key for ttl
// after the round's entry reached it, so after the round was sent. The
// validity is thus measured from the round's start, as for any round. With
// less than half the ttl left, it returns nil: the next round counts the
// handed keys as its own (protocol.Join.Prev) and makes a lock of the full
// ttl. See docs/SAFETY.md, "The handoff on the node keeps mutual
// exclusion".
func (hw *handWait) handed(ttl time.Duration) *round {
	if !hw.gotHand {
		return nil
	}
	hw.gotHand = false
	w, h := &hw.iw.w, hw.h
	c := w.c
	now := c.cfg.clock.Now()
	validity := clock.Validity(ttl, now.Sub(hw.curStart), c.cfg.drift)
	if validity < ttl/2 {
		return nil
	}
	tok := hw.current()
	j := protocol.Join{Place: hw.iw.place, Ticket: w.began.UnixMilli() / ticketStep * ticketStep, Channel: h.channel, Prev: tok, Entries: protocol.MayHave}
	r := c.handedRound(w.keys, ttl, protocol.HandPrefix+tok, hw.curStart, now.Add(validity), j)
	if w.attempts == 1 && len(hw.hands) == 1 && tok == hw.iw.place {
		h.mu.Lock()
		if h.sole == nil {
			h.sole = map[string]struct{}{}
		}
		h.sole[r.acq.Token] = struct{}{}
		h.mu.Unlock()
	}
	h.topUp(r, h.ledger.HandedNodes(tok), hw.curCalls)
	return r
}

// done forgets the waiter's rounds that joined for a handoff. The ledger
// expects every round that joined: the first (whose token is the waiter's
// place), the failed ones, and the one that obtained the lock. done
// forgets them all, but for a lock handed off on the nodes, which its
// Unlock forgets. A handoff to a forgotten round is stray, released when
// announced (see releaseStray).
//
// A waiter that gave up leaves the line: one release of its current round
// takes the Client's entries for the key off each line, and releases the
// key where a node handed it off to that round. A waiter that holds the
// lock leaves nothing: each of its rounds replaced the previous one's
// entries, and the lock's round took its own off (a handoff popped them,
// or refused releases them with the lock). An earlier round's entry that
// a later one missed is stray when handed off, or taken off by the
// Client's next first round for the key (protocol.MayHave).
//
// A node that announced a handoff to a round before the waiter forgot it
// still holds the key for that round: done releases it, as stray (see
// handoff.drop), but for the lock's own round and a current round that
// the leave releases.
func (hw *handWait) done(l *Lock) {
	var lockToken string
	if l != nil {
		lockToken = l.token
	}
	cur := hw.current()
	if hw.expected {
		for _, t := range append(hw.hands, hw.iw.place, lockToken) {
			switch {
			case lockToken == protocol.HandPrefix+t:
			case t == lockToken || l == nil && t == cur:
				hw.h.ledger.Forget(t, false)
			default:
				hw.h.drop(t)
			}
		}
	}
	if l == nil && cur != "" {
		hw.h.leave(hw.iw.w.keys[0], cur, hw.ttl)
	}
}

// handedRound returns the record of a lock that a quorum of nodes handed
// off on the node (see handWait.handed). keys hold token, a hand value,
// since no earlier than start, and the lock is valid until until. The
// round made no calls, so the lock's release and extensions go to every
// node. j is the waiter's place, which its top-up takes off the line (see
// topUp).
func (c *Client) handedRound(keys []string, ttl time.Duration, token string, start, until time.Time, j protocol.Join) *round {
	r, replies := alloc.WithSlice[round, protocol.AcquireReply](len(c.nodes))
	r.c, r.keys, r.replies = c, keys, replies
	r.acq = protocol.Acquire{Keys: append(c.storedKeys(keys, 1), c.stateKey), Token: token, TTL: ttl, Join: j}
	r.cmd = c.proto.AcquireCmd(r.acq) // for topUp; the release shares its values
	r.start, r.until = start, until
	r.decide()
	return r
}

// topUp acquires r's hand value, in the background, on the nodes that will
// not hand the key off. r is a lock that the nodes in handed (a bit per
// node) handed off. Those are the nodes where last, the waiter's round that
// joined the line, was granted (and released as failed) or not sent. A node
// whose answer to last is missing or an error is left alone: the request
// may still land there. Where the acquire is granted, the lock's release
// hands the key off too. Without this, a node that missed one handoff would
// take part in none again, leaving a bare quorum that every waiter must
// hear. A refusal changes nothing, the validity stays the handoff's, and
// the lock's release waits for the acquire (see releaseLock).
func (h *handoff) topUp(r *round, handed uint64, last *quorum.Round) {
	c := h.c
	if c.cfg.noTopUp || last == nil || len(c.nodes) > 64 {
		return
	}
	var to uint64
	for i := range c.nodes {
		if handed&(1<<i) != 0 {
			continue
		}
		if res, done := last.Result(i); !done || (res != nil && res != node.ErrNotSent) {
			// The round joined there (the node is about to hand off too),
			// or its request may still land there, and join.
			continue
		}
		to |= 1 << i
	}
	if to == 0 {
		return
	}
	r.callTimeout = c.cfg.nodeTimeout
	r.background = true
	r.calls = c.life.workers.Start(context.Background(), len(c.nodes), r.callTimeout, func(ctx context.Context, i int) error {
		if to&(1<<i) == 0 {
			return nil // handed off, or about to be
		}
		return r.acquireOn(ctx, i)
	})
}

// leave takes the round with token of a waiter for key off the key's line
// on every node. Where a release handed the key off to that round, it
// releases (and hands off) the key (see handWait.done). It does not wait.
// On a closed Client it sends nothing: the entries and the keys expire.
func (h *handoff) leave(key, token string, ttl time.Duration) {
	h.c.releaseAside(key, protocol.Release{Keys: []string{h.c.stored(key)}, Token: token, Announce: true, Leave: true}, handover{TTL: ttl})
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
	c := h.c
	if err := c.life.enter(); err != nil {
		return // closed: the handoffs expire
	}
	defer c.life.exit()
	c.life.workers.Start(context.Background(), len(c.nodes), c.cfg.nodeTimeout, func(ctx context.Context, i int) error {
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
	ctx, cancel := context.WithTimeout(context.Background(), h.c.cfg.nodeTimeout)
	defer cancel()
	_ = h.releaseHand(ctx, i, token, key)
}

// releaseHand releases key (as stored) on node i where it holds the hand
// value of the round with token, and hands it off to the next in line.
func (h *handoff) releaseHand(ctx context.Context, i int, token, key string) error {
	c := h.c
	cmd := c.proto.Release(protocol.Release{Keys: []string{key}, Token: protocol.HandPrefix + token, Announce: true})
	return c.nodes[i].Release(ctx, cmd, c.cfg.nodeTimeout, key)
}
