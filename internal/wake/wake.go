// Package wake ends a lock client's retry waits early: the release script
// publishes every deletion on [protocol.ReleasedChannel] + the key, and a
// client whose lock waits for a key held elsewhere subscribes to that key's
// channel on each node (one pub/sub connection per node per client, opened
// at the first such wait) and retries as soon as a node announces that the
// key was released, instead of sleeping until its next retry.
//
// A missed message (a subscription not yet in place, a broken connection, a
// holder whose key simply expires) only means waiting for the timed retry.
// Safety does not depend on the messages: they only trigger a round. A key
// stays subscribed until nobody has waited for it for the idle time, and
// the connections close once no key is subscribed, so that a client
// receives only the releases of keys it waits for.
package wake

import (
	"context"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/protocol"
)

// Waker is a client's pub/sub subscriptions and the waits for a key's
// release. It is safe for concurrent use; make it with [New].
type Waker struct {
	nodes []redis.UniversalClient // the nodes that can be subscribed (not Rings)
	idle  time.Duration
	clock clock.Clock

	mu      sync.Mutex
	closed  bool
	quit    chan struct{}              // closed by Close: stops the idle loop
	subs    []*sub                     // one per node while a key is subscribed, else nil
	keys    map[string]time.Time       // subscribed keys (as on the nodes) and their last wait
	waiters map[string]*entry          // by key on the nodes, until announced
	entries map[<-chan struct{}]*entry // every entry with waits, announced or not
	named   map[string]named           // per subscribed key, the last announcement and whom it named
	// confirming holds, per key newly subscribed for a wait that did not
	// listen before (see OnSince), the nodes (a bit each) that confirmed
	// the subscription so far, until a majority did.
	confirming map[string]uint64
	// cleared holds the subscribed keys whose queues on the nodes hold no
	// entry of the client's (see ForgetSole), until the next waiter joins.
	cleared map[string]struct{}
	// heard is set while named has an entry, so that Heard needs no lock.
	heard atomic.Bool
	// live is the client's channel (protocol.LiveChannel and an id),
	// subscribed on every connection: releases hand keys over only to
	// waiters of a client subscribed to it, and say so on it. "" for none.
	live string
	// hands holds, per token of a waiter's round, the nodes that announced
	// on live that they handed a key over to it (see Expect).
	hands map[string]hand
	// liveOn counts the connections on which live is subscribed.
	liveOn atomic.Int32
	// stray receives the handoffs to rounds that no waiter expects (see
	// SetStray).
	stray func(node int, token, key string)
	wg    sync.WaitGroup // the listeners, the idle loop and the (un)subscribing goroutines
}

// sub is one node's pub/sub connection. Its mu orders the connection's
// subscription changes (see reconcile).
type sub struct {
	ps     *redis.PubSub
	mu     sync.Mutex
	idx    int  // the node's place among w.nodes
	liveOn bool // live is subscribed on ps
	// retired is set once live is unsubscribed for good (see retire), and
	// unsubbed, guarded by Waker.mu, is closed when the node confirms it.
	retired  bool
	unsubbed chan struct{}
}

// hand is what the nodes announced of the handoffs to one round's token.
type hand struct {
	key   string // the key as stored
	nodes uint64 // a bit per node (by sub.idx) that handed the key over
}

// named is whom an announcement named as next in line ("" for nobody),
// and when it came.
type named struct {
	next string
	at   time.Time
}

// entry is the channel of the waits for one key's release, closed when a
// node announces it, and how many are waiting.
type entry struct {
	ch chan struct{}
	n  int
	// next is the waiter the announcement named as next in line ("" for
	// none); written before ch is closed.
	next string
}

// New returns a Waker on nodes whose keys stay subscribed for idle after
// their last wait. A go-redis Ring routes a channel by its name, not to the
// shard of the key whose release is published there (and panics on a
// subscription without a channel): Rings are left out, and their waiters
// rely on the other nodes and the timed retry.
func New(nodes []redis.UniversalClient, idle time.Duration, clk clock.Clock) *Waker {
	return NewLive(nodes, idle, clk, "")
}

// NewLive is [New] for a client whose waiters join queues for handoffs on
// the nodes: every connection subscribes to live, the client's channel
// (see protocol.LiveChannel), on which releases announce those handoffs
// (see Expect).
func NewLive(nodes []redis.UniversalClient, idle time.Duration, clk clock.Clock, live string) *Waker {
	w := &Waker{idle: idle, clock: clk, quit: make(chan struct{}), live: live}
	for _, n := range nodes {
		if _, ring := n.(*redis.Ring); !ring {
			w.nodes = append(w.nodes, n)
		}
	}
	return w
}

// On returns a channel that is closed when a node announces the release of
// key (as stored), subscribing to it if need be; nil after Close, or when
// no node can be subscribed. Call [Waker.Done] when the wait is over.
func (w *Waker) On(key string) <-chan struct{} { return w.OnSince(key, time.Time{}) }

// OnSince is [Waker.On] for a waiter that did not listen from since on
// (zero: always listened), typically while its round was out: an
// announcement heard after since, the last one heard, closes the channel
// at once, and [Waker.Next] returns whom it named. A wait that begins only
// after its round failed therefore still hears a release that came while
// the round was out.
//
// When key was not subscribed, an announcement may also come before the
// subscription is in place, and nobody hears it: the channel is then
// closed, naming nobody, once a majority of the nodes have confirmed the
// subscription, so that the waiter tries again at once instead of
// sleeping through a release it could not hear. (A release announces
// itself on every node that refused a waiter, so a waiter refused by a
// majority hears it from one of the majority that confirmed.)
func (w *Waker) OnSince(key string, since time.Time) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || len(w.nodes) == 0 {
		return nil
	}
	if n, ok := w.named[key]; ok && !since.IsZero() && n.at.After(since) {
		if _, subscribed := w.keys[key]; subscribed {
			e := &entry{ch: make(chan struct{}), n: 1, next: n.next}
			close(e.ch)
			w.entries[e.ch] = e
			w.keys[key] = w.clock.Now()
			return e.ch
		}
	}
	if w.subs == nil {
		w.connect()
	}
	_, subscribed := w.keys[key]
	w.keys[key] = w.clock.Now()
	if !subscribed {
		if !since.IsZero() {
			w.confirming[key] = 0
		}
		// In the background, each node on its own: a node that is down
		// would hold this wait, or the other nodes' subscriptions, for its
		// dial. go-redis subscribes again after a reconnect.
		for _, s := range w.subs {
			w.wg.Go(func() { w.reconcile(s, []string{key}) })
		}
	}
	e := w.waiters[key]
	if e == nil {
		e = &entry{ch: make(chan struct{})}
		w.waiters[key] = e
		w.entries[e.ch] = e
	}
	e.n++
	return e.ch
}

// connect opens the pub/sub connections and starts their listeners and the
// idle loop. Callers hold w.mu.
func (w *Waker) connect() {
	for i, n := range w.nodes {
		s := &sub{ps: n.Subscribe(context.Background()), idx: i} // no channel yet: connects on the first
		w.subs = append(w.subs, s)
		w.wg.Go(func() { w.listen(s) })
	}
	w.keys = map[string]time.Time{}
	w.confirming = map[string]uint64{}
	if w.waiters == nil {
		w.waiters = map[string]*entry{}
		w.entries = map[<-chan struct{}]*entry{}
		w.named = map[string]named{}
	}
	if w.hands == nil {
		w.hands = map[string]hand{}
	}
	subs := w.subs
	w.wg.Go(func() { w.idleLoop(subs) })
}

// reconcile brings s's subscriptions of keys in line with w.keys: it
// subscribes to those still in w.keys and unsubscribes from the others.
// Changes to one connection run one at a time, each deciding from w.keys as
// they are when it runs, so that a subscription and an unsubscription of
// one key started in quick succession cannot land in the wrong order.
func (w *Waker) reconcile(s *sub, keys []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var on, off []string
	w.mu.Lock()
	for _, k := range keys {
		if _, ok := w.keys[k]; ok && !w.closed {
			on = append(on, protocol.ReleasedChannel+k)
		} else {
			off = append(off, protocol.ReleasedChannel+k)
		}
	}
	if len(on) > 0 && w.live != "" && !s.retired {
		on = append(on, w.live) // again: a no-op, and the first time it is in place with the key's
	}
	w.mu.Unlock()
	if len(on) > 0 {
		err := s.ps.Subscribe(context.Background(), on...)
		if w.live != "" && err == nil && !s.liveOn && !s.retired {
			s.liveOn = true
			w.liveOn.Add(1)
		}
	}
	if len(off) > 0 {
		_ = s.ps.Unsubscribe(context.Background(), off...)
	}
}

// Done ends a wait that On(key) began and returned ch for. The key stays
// subscribed for the idle time from now.
func (w *Waker) Done(key string, ch <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.keys[key]; ok {
		w.keys[key] = w.clock.Now()
	}
	if e := w.entries[ch]; e != nil {
		if e.n--; e.n == 0 {
			delete(w.entries, ch)
			if w.waiters[key] == e {
				delete(w.waiters, key)
			}
		}
	}
}

// Next returns the waiter that the announcement which closed ch, a channel
// from On, named as next in line for the key: "" when it named none, or
// before ch is closed. Call it before Done.
func (w *Waker) Next(ch <-chan struct{}) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.entries[ch]; e != nil {
		return e.next
	}
	return ""
}

// listen wakes the waiters of every released key announced on s until s
// is closed.
func (w *Waker) listen(s *sub) {
	for {
		m, err := s.ps.Receive(context.Background())
		w.mu.Lock()
		closed := w.closed
		switch m := m.(type) {
		case *redis.Message:
			w.message(s, m)
		case *redis.Subscription:
			if m.Kind == "unsubscribe" && m.Channel == w.live && s.unsubbed != nil {
				close(s.unsubbed) // see retire
				s.unsubbed = nil
			}
			if m.Kind == "subscribe" {
				w.confirmed(s, m.Channel)
			}
		}
		current := slices.Contains(w.subs, s)
		w.mu.Unlock()
		if err != nil && (closed || !current) {
			return // Close, or dropIdle, closed the connection (see retire)
		}
		if err != nil {
			// The node is down: go-redis reconnects on the next receive.
			select {
			case <-w.clock.After(100 * time.Millisecond):
			case <-w.quit:
			}
		}
	}
}

// message handles an announcement that came on s. Callers hold w.mu.
func (w *Waker) message(s *sub, msg *redis.Message) {
	if msg.Channel == w.live {
		w.handed(s, msg.Payload)
		return
	}
	key := strings.TrimPrefix(msg.Channel, protocol.ReleasedChannel)
	w.named[key] = named{msg.Payload, w.clock.Now()}
	w.heard.Store(true)
	if e := w.waiters[key]; e != nil {
		e.next = msg.Payload
		close(e.ch)
		delete(w.waiters, key)
	}
}

// confirmed notes that s's node confirmed the subscription of channel,
// and wakes the waiters of a key whose subscription a majority of the
// nodes have now confirmed, if it is in confirming (see OnSince).
// Callers hold w.mu.
func (w *Waker) confirmed(s *sub, channel string) {
	key, ok := strings.CutPrefix(channel, protocol.ReleasedChannel)
	nodes, pending := w.confirming[key]
	if !ok || !pending || s.idx >= 64 {
		return
	}
	nodes |= 1 << s.idx
	if bits.OnesCount64(nodes) <= len(w.nodes)/2 {
		w.confirming[key] = nodes
		return
	}
	delete(w.confirming, key)
	if e := w.waiters[key]; e != nil {
		e.next = ""
		close(e.ch)
		delete(w.waiters, key)
	}
}

// handed records that s's node handed a key over to a round, as payload
// says (see release.lua: the hand value's length, ':', the value, which is
// protocol.HandPrefix and the round's token, and the key), and wakes the
// waiters of the key. A handoff to a round that no waiter expects (one
// that obtained the lock, or gave up, while its entry was still in a
// node's queue) goes to the stray function. Callers hold w.mu.
func (w *Waker) handed(s *sub, payload string) {
	n, rest, ok := strings.Cut(payload, ":")
	size, err := strconv.Atoi(n)
	if !ok || err != nil || size > len(rest) || s.idx >= 64 {
		return
	}
	token, ok := strings.CutPrefix(rest[:size], protocol.HandPrefix)
	key := rest[size:]
	if !ok {
		return
	}
	h, expected := w.hands[token]
	if !expected {
		if w.stray != nil {
			w.wg.Go(func() { w.stray(s.idx, token, key) })
		}
		return
	}
	h.nodes |= 1 << s.idx
	w.hands[token] = h
	if e := w.waiters[key]; e != nil {
		e.next = rest[:size]
		close(e.ch)
		delete(w.waiters, key)
	}
}

// SetStray sets the function that receives the handoffs to rounds that no
// waiter expects: node is the node's index, token the round's and key the
// key as stored. It runs in a goroutine of its own; Close waits for it.
func (w *Waker) SetStray(f func(node int, token, key string)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stray = f
}

// Expect tells w that the round with token may join key's queue (as
// stored) for a handoff: an announcement on the client's channel that a
// node handed key over to it wakes key's waiters. Call it before the round
// is sent, and [Waker.Forget] once its waiter is done.
func (w *Waker) Expect(token, key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.hands == nil {
		w.hands = map[string]hand{}
	}
	w.hands[token] = hand{key: key}
}

// dropLive notes that s, being closed, no longer has live subscribed.
func (w *Waker) dropLive(s *sub) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.liveOn {
		s.liveOn = false
		w.liveOn.Add(-1)
	}
}

// Live reports whether the client's channel (see NewLive) is subscribed on
// some node: the client's waiters may then join for handoffs, which each
// node makes only while the channel is subscribed on it.
func (w *Waker) Live() bool { return w.liveOn.Load() > 0 }

// Handed returns how many nodes announced that they handed a key over to
// the round with token.
func (w *Waker) Handed(token string) int { return bits.OnesCount64(w.HandedNodes(token)) }

// HandedNodes returns the nodes that announced that they handed a key over
// to the round with token: a bit per node, by its place among the nodes
// given to New (NewLive takes no Rings, so a Client with handoffs has the
// same order).
func (w *Waker) HandedNodes(token string) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.hands[token].nodes
}

// Forget drops what w knows of the handoffs to the round with token.
func (w *Waker) Forget(token string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.hands, token)
}

// idleLoop drops idle keys (see dropIdle) until the connections subs are
// closed, or until Close.
func (w *Waker) idleLoop(subs []*sub) {
	next := w.idle
	for {
		select {
		case <-w.clock.After(next):
		case <-w.quit:
			return
		}
		var done bool
		if next, done = w.dropIdle(subs); done {
			return
		}
	}
}

// dropIdle unsubscribes the keys that nobody waits for and none has waited
// for in the idle time, and closes the connections subs when no key is
// left. It returns when to look again, or done once subs are gone. The next
// wait subscribes anew.
func (w *Waker) dropIdle(subs []*sub) (next time.Duration, done bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || len(w.subs) == 0 || w.subs[0] != subs[0] {
		return 0, true
	}
	now := w.clock.Now()
	var drop []string
	next = w.idle
	for k, last := range w.keys {
		if left := w.idle - now.Sub(last); left > 0 || w.waiters[k] != nil {
			next = min(next, max(left, w.idle/10))
			continue
		}
		delete(w.keys, k)
		delete(w.named, k)
		delete(w.confirming, k)
		delete(w.cleared, k)
		w.heard.Store(len(w.named) > 0)
		drop = append(drop, k)
	}
	if len(w.keys) == 0 {
		subs := w.subs
		w.subs = nil // the listeners end once retire closes their connections
		w.wg.Go(func() { w.retire(subs) })
		return 0, true
	}
	if len(drop) > 0 {
		for _, s := range w.subs {
			w.wg.Go(func() { w.reconcile(s, drop) })
		}
	}
	return next, false
}

// Close stops the listeners and waits for them, and for the stray
// function's calls: a client's node hands nothing over to it once Close
// returns (see retire). Waiters are not woken. It is safe to call more
// than once.
func (w *Waker) Close() {
	w.mu.Lock()
	subs := w.subs
	if !w.closed {
		close(w.quit)
	}
	w.closed, w.subs = true, nil
	w.mu.Unlock()
	w.retire(subs)
	w.wg.Wait()
}

// Named returns the waiter that the last announcement of key's release
// (as stored) named as next in line, and when it came; "" when it named
// nobody, or when none was heard since key was subscribed. A client that
// has just released a key hears its own announcement, if it waited for the
// key before: its next Lock can then let the named waiter go first.
func (w *Waker) Named(key string) (next string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.named[key]
	return n.next, n.at
}

// Heard reports, without taking a lock, whether any key has an
// announcement to report through Named.
func (w *Waker) Heard() bool { return w.heard.Load() }

// Waiting reports whether a wait for key (as stored) is under way.
func (w *Waker) Waiting(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waiters[key] != nil
}

// Confirming reports whether a wait for key (as stored) waits for a
// majority of the nodes to confirm its new subscription (see OnSince).
func (w *Waker) Confirming(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.confirming[key]
	return ok
}

// Joining tells w that a waiter's first round for key (as stored) is
// about to be sent. It reports, when key is subscribed (a wait for it
// began less than the idle time ago), that the client's earlier waiters
// may have left entries in the key's queue on the nodes (entries), or
// that those are known to be gone (cleared, see ForgetSole); when key is not
// subscribed, neither. That knowledge is reported once: the round may join
// the queue again.
func (w *Waker) Joining(key string) (entries, cleared bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, recent := w.keys[key]
	_, cleared = w.cleared[key]
	delete(w.cleared, key)
	return recent && !cleared, recent && cleared
}

// ForgetSole is [Waker.Forget] for the round with token whose lock is
// being released, when that round was its waiter's only one: if every
// node announced a handoff to it, each took the round's entry off the
// key's queue, and the client has none left there; the next waiter's
// first round learns so from Joining (while the key stays subscribed).
// It reports whether it noted that.
func (w *Waker) ForgetSole(token string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	h, ok := w.hands[token]
	delete(w.hands, token)
	n := len(w.nodes)
	if !ok || n == 0 || n > 64 || h.nodes != 1<<n-1 {
		return false
	}
	if _, ok := w.keys[h.key]; !ok {
		return false
	}
	if w.cleared == nil {
		w.cleared = map[string]struct{}{}
	}
	w.cleared[h.key] = struct{}{}
	return true
}

// Connections returns how many pub/sub connections are open.
func (w *Waker) Connections() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.subs)
}

// Waits returns how many keys have waits under way.
func (w *Waker) Waits() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waiters)
}

// Subscribed returns how many keys are subscribed.
func (w *Waker) Subscribed() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.keys)
}
