package wake

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redquorum/redquorum/internal/protocol"
)

// Ledger records the handoffs that the nodes announce on a client's hand
// channel. A release hands a key off on the node to a waiter whose round
// joined the key's line for it, and tells the waiter's client there. The
// [Waker] given the Ledger subscribes to the hand channel and passes it
// those announcements. A nil *Ledger has no channel and records nothing.
// A Ledger is safe for concurrent use; make it with [NewLedger].
type Ledger struct {
	handChannel  string       // protocol.HandChannel and the client's id
	subscribedOn atomic.Int32 // the Waker's connections with handChannel subscribed

	mu       sync.Mutex
	attached bool // given to a Waker
	nodes    int  // the Waker's nodes that can be subscribed
	// hands holds, per token of a waiter's round, the nodes that announced
	// that they handed a key off to it (see Expect).
	hands map[string]hand
	// keys holds the keys that the Waker has subscribed; true for a key
	// whose lines on the nodes hold no entry of the client's (see
	// Forget), until the next waiter joins.
	keys map[string]bool
	// stray receives the handoffs to rounds that no waiter expects.
	stray func(node int, token, key string)
}

// hand is what the nodes announced of the handoffs to one round's token.
type hand struct {
	key   string // the key as stored
	nodes uint64 // a bit per node (by sub.idx) that handed the key off
}

// handoff is a handoff that a node announced. key (as stored) was handed
// off to value, which is [protocol.HandPrefix] and a round's token. stray is
// set when no waiter expects it, and passes the handoff to the stray function.
type handoff struct {
	key, value string
	stray      func()
}

// NewLedger returns a Ledger for the client's hand channel (see
// protocol.HandChannel), and nil for "": a client without one takes no
// handoffs. stray receives the handoffs to rounds that no waiter expects:
// node is the node's index, token the round's and key the key as stored.
// It runs in a goroutine of its own; the Waker's Close waits for it.
func NewLedger(handChannel string, stray func(node int, token, key string)) *Ledger {
	if handChannel == "" {
		return nil
	}
	return &Ledger{handChannel: handChannel, stray: stray, hands: map[string]hand{}, keys: map[string]bool{}}
}

// Subscribed reports whether the client's hand channel is subscribed on
// some node. The client's waiters may then join for handoffs. A node makes
// handoffs only while the channel is subscribed on it.
func (l *Ledger) Subscribed() bool { return l != nil && l.subscribedOn.Load() > 0 }

// Expect notes that the round with token may join key's line (as stored)
// for a handoff. A node's announcement that it handed key off to the round
// then wakes key's waits. Call it before the round is sent, and call
// [Ledger.Forget] once its waiter is done.
func (l *Ledger) Expect(token, key string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hands[token] = hand{key: key}
}

// HandedNodes returns the nodes that announced that they handed a key off
// to the round with token. It has a bit per node, by the node's place among
// the Waker's nodes that are not Rings.
func (l *Ledger) HandedNodes(token string) uint64 {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hands[token].nodes
}

// Forget drops what l knows of the handoffs to the round with token. It
// reports whether it noted that the client has no entry left in the key's
// line. sole means that the round's lock is being released, and that the
// round was its waiter's only one. If every node then announced a handoff to
// it, each took the round's entry off the key's line, and Forget notes so.
// The next waiter's first round learns it from [Ledger.Joining], while the
// key stays subscribed.
func (l *Ledger) Forget(token string, sole bool) bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	h, ok := l.hands[token]
	delete(l.hands, token)
	if !sole || !ok || l.nodes == 0 || l.nodes > 64 || h.nodes != 1<<l.nodes-1 {
		return false
	}
	if _, subscribed := l.keys[h.key]; !subscribed {
		return false
	}
	l.keys[h.key] = true
	return true
}

// Drop forgets the round with token, as Forget does for a round whose
// waiter did not obtain the lock through it. It returns the nodes that
// announced a handoff to the round before it was forgotten, and the key
// (as stored). Those nodes still hold the key for the round, unless a later
// round of its waiter took it over: no announcement will come again to
// release them as stray, so the caller releases them.
func (l *Ledger) Drop(token string) (nodes uint64, key string) {
	if l == nil {
		return 0, ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.hands[token]
	delete(l.hands, token)
	return h.nodes, h.key
}

// Joining notes that a waiter's first round for key (as stored) is about
// to be sent. entries reports that the client's earlier waiters may have
// left entries in the key's line on the nodes. cleared reports that those
// are known to be gone (see [Ledger.Forget]). Both are false when key is not
// subscribed, that is when no wait for it began within the Waker's idle
// time. cleared is reported once, since the round may join the line again.
func (l *Ledger) Joining(key string) (entries, cleared bool) {
	if l == nil {
		return false, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	cleared, subscribed := l.keys[key]
	if subscribed {
		l.keys[key] = false
	}
	return subscribed && !cleared, cleared
}

// handed records that node handed a key off to a round, as payload says.
// The payload (see release.lua) is the hand value's length, ':', the hand
// value and the key. The hand value is protocol.HandPrefix and the round's
// token. handed returns the handoff, or false for a payload it cannot read.
// When no waiter expects the handoff, the handoff carries a stray call;
// without a stray function, handed returns false. No waiter expects a handoff
// to a round that obtained the lock, or gave up, while its entry was in a line.
func (l *Ledger) handed(node int, payload string) (handoff, bool) {
	n, rest, ok := strings.Cut(payload, ":")
	size, err := strconv.Atoi(n)
	if !ok || err != nil || size < 0 || size > len(rest) || node >= 64 {
		return handoff{}, false
	}
	value, key := rest[:size], rest[size:]
	token, ok := strings.CutPrefix(value, protocol.HandPrefix)
	if !ok {
		return handoff{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	h, expected := l.hands[token]
	if !expected {
		if stray := l.stray; stray != nil {
			return handoff{key: key, value: value, stray: func() { stray(node, token, key) }}, true
		}
		return handoff{}, false
	}
	h.nodes |= 1 << node
	l.hands[token] = h
	return handoff{key: key, value: value}, true
}

// The Waker's hooks. The Waker calls them with its own lock held.

// channel returns the hand channel to subscribe, "" for none.
func (l *Ledger) channel() string {
	if l == nil {
		return ""
	}
	return l.handChannel
}

// attach notes that a Waker of nodes nodes that can be subscribed uses l.
func (l *Ledger) attach(nodes int) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.attached {
		panic("wake: a Ledger given to a second Waker")
	}
	l.attached, l.nodes = true, nodes
}

// subscribedChanged adds delta to the connections with the hand channel
// subscribed.
func (l *Ledger) subscribedChanged(delta int32) {
	if l != nil {
		l.subscribedOn.Add(delta)
	}
}

// keySubscribed notes that the Waker subscribed key.
func (l *Ledger) keySubscribed(key string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys[key] = false
}

// keyUnsubscribed notes that the Waker dropped key, idle: what l knew of its
// lines is forgotten.
func (l *Ledger) keyUnsubscribed(key string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.keys, key)
}
