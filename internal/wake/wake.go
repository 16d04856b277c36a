package wake

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/protocol"
)

// Waker is a client's pub/sub connections to the nodes and its subscribed
// keys. It passes each announcement to the waits for the key ([Wait]) and
// to the client's [Ledger]. It is safe for concurrent use; make it with
// [New].
type Waker struct {
	nodes       []redis.UniversalClient // the nodes that can be subscribed (not Rings)
	idle        time.Duration
	clock       clock.Clock
	ledger      *Ledger // nil: no hand channel
	handChannel string  // the ledger's channel, "" for none

	mu      sync.Mutex
	closed  bool
	quit    chan struct{}        // closed by Close: stops the idle loop
	subs    []*sub               // one per node while a key is subscribed, else nil
	keys    map[string]time.Time // subscribed keys (as on the nodes) and their last wait
	waiters map[string]*entry    // by key on the nodes, until announced
	named   map[string]named     // per subscribed key, the last announcement and whom it named
	// recent holds, per subscribed key, the last announcements (at most
	// recentLimit), oldest first: each node of a release names the first
	// of its own line, and the lines of the nodes may differ.
	recent map[string][]named
	// confirming holds, per key newly subscribed for a wait that did not
	// listen before (see Listen), the nodes (a bit each) that confirmed
	// the subscription so far, until a majority did.
	confirming map[string]uint64
	// heard is set while named has an entry, so that Heard needs no lock;
	// listening is len(keys), so that Subscribed needs none.
	heard     atomic.Bool
	listening atomic.Int32
	wg        sync.WaitGroup // the listeners, the idle loop, the (un)subscribing goroutines and stray calls
}

// sub is one node's pub/sub connection. Its mu orders the connection's
// subscription changes (see reconcile).
type sub struct {
	ps     *redis.PubSub
	mu     sync.Mutex
	idx    int  // the node's place among w.nodes
	handOn bool // the hand channel is subscribed on ps
	// retired is set once the hand channel is unsubscribed for good (see
	// retire), and unsubbed, guarded by Waker.mu, is closed when the node
	// confirms it.
	retired  bool
	unsubbed chan struct{}
}

// named is whom an announcement named as next in line ("" for nobody),
// and when it came.
type named struct {
	next string
	at   time.Time
}

// New returns a Waker on nodes whose keys stay subscribed for idle after
// their last wait. With a Ledger l, every connection also subscribes to the
// ledger's hand channel, and the handoffs announced there go to l. A nil l
// means no handoffs. A Ledger serves one Waker: New panics on a Ledger given
// to another.
//
// New leaves Rings out. A go-redis Ring routes a channel by its name, not to
// the shard of the key whose release is published there. It also panics on
// a subscription without a channel. A Ring's waiters rely on the other nodes
// and the timed retry.
func New(nodes []redis.UniversalClient, idle time.Duration, clk clock.Clock, l *Ledger) *Waker {
	w := &Waker{idle: idle, clock: clk, ledger: l, handChannel: l.channel(), quit: make(chan struct{})}
	for _, n := range nodes {
		if _, ring := n.(*redis.Ring); !ring {
			w.nodes = append(w.nodes, n)
		}
	}
	l.attach(len(w.nodes))
	return w
}

// subscribe adds key to the subscribed keys, on each node in the
// background. Callers hold w.mu.
func (w *Waker) subscribe(key string) {
	if w.subs == nil {
		w.connect()
	}
	w.keys[key] = w.clock.Now()
	w.listening.Store(int32(len(w.keys)))
	w.ledger.keySubscribed(key)
	// Each node on its own: a node that is down would hold this wait, or
	// the other nodes' subscriptions, for its dial. go-redis subscribes
	// again after a reconnect.
	for _, s := range w.subs {
		w.wg.Go(func() { w.reconcile(s, []string{key}) })
	}
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
	w.listening.Store(0)
	w.confirming = map[string]uint64{}
	if w.waiters == nil {
		w.waiters = map[string]*entry{}
		w.named = map[string]named{}
	}
	subs := w.subs
	w.wg.Go(func() { w.idleLoop(subs) })
}

// reconcile brings s's subscriptions of keys in line with w.keys. It
// subscribes to those still in w.keys and unsubscribes from the others.
// Changes to one connection run one at a time. Each decides from w.keys as
// they are when it runs. So a subscription and an unsubscription of one key,
// started in quick succession, cannot land in the wrong order.
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
	if len(on) > 0 && w.handChannel != "" && !s.retired {
		on = append(on, w.handChannel) // again: a no-op, and the first time it is in place with the key's
	}
	w.mu.Unlock()
	if len(on) > 0 {
		err := s.ps.Subscribe(context.Background(), on...)
		if w.handChannel != "" && err == nil && !s.handOn && !s.retired {
			s.handOn = true
			w.ledger.subscribedChanged(1)
		}
	}
	if len(off) > 0 {
		_ = s.ps.Unsubscribe(context.Background(), off...)
	}
}

// listen passes every message on s to the waits or the ledger until s is
// closed.
func (w *Waker) listen(s *sub) {
	for {
		m, err := s.ps.Receive(context.Background())
		w.mu.Lock()
		closed := w.closed
		switch m := m.(type) {
		case *redis.Message:
			w.message(s, m)
		case *redis.Subscription:
			if m.Kind == "unsubscribe" && m.Channel == w.handChannel && s.unsubbed != nil {
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
	if w.handChannel != "" && msg.Channel == w.handChannel {
		w.handed(s, msg.Payload)
		return
	}
	key := strings.TrimPrefix(msg.Channel, protocol.ReleasedChannel)
	n := named{msg.Payload, w.clock.Now()}
	w.named[key] = n
	if w.recent == nil {
		w.recent = map[string][]named{}
	}
	r := append(w.recent[key], n)
	w.recent[key] = r[max(0, len(r)-recentLimit):]
	w.heard.Store(true)
	w.wake(key, msg.Payload)
}

// handed passes a handoff that s's node announced on the hand channel to
// the ledger. It wakes the key's waits, naming the hand value. For a handoff
// that no waiter expects, it calls the stray function instead, in a
// goroutine that Close waits for. Callers hold w.mu.
func (w *Waker) handed(s *sub, payload string) {
	h, ok := w.ledger.handed(s.idx, payload)
	switch {
	case !ok:
	case h.stray != nil:
		w.wg.Go(h.stray)
	default:
		w.wake(h.key, h.value)
	}
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

// dropIdle unsubscribes the keys that have no wait and had none in the idle
// time. When no key is left, it closes the connections subs.
// It returns when to look again, or done once subs are gone. The next wait
// subscribes anew.
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
		delete(w.recent, k)
		delete(w.confirming, k)
		w.ledger.keyUnsubscribed(k)
		w.heard.Store(len(w.named) > 0)
		drop = append(drop, k)
	}
	w.listening.Store(int32(len(w.keys)))
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

// Close stops the listeners and waits for them and for the stray function's
// calls. Once Close returns, no node hands anything off to the client (see
// retire). Waits are not woken. It is safe to call more than once.
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

// Connections returns how many pub/sub connections are open.
func (w *Waker) Connections() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.subs)
}

// Subscribed returns how many keys are subscribed.
func (w *Waker) Subscribed() int { return int(w.listening.Load()) }
