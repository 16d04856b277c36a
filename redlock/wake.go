package redlock

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/retry"
)

// The release script publishes every deletion on the channel
// releasedChannel+key. A Client whose Lock waits for a key held elsewhere
// subscribes to that key's channel on each node (one pub/sub connection per
// node per Client, opened at the first such wait) and retries as soon as a
// node announces that the key was released, instead of sleeping until its
// next retry. A missed message (a subscription not yet in place, a broken
// connection, a holder whose key simply expires) only means waiting for the
// timed retry as before. Safety does not depend on the messages: they only
// trigger a round. A key stays subscribed until no Lock has waited for it
// for wakeIdle, and the connections close once no key is subscribed, so that
// a Client receives only the releases of keys it waits for (a pattern
// subscription would deliver every release under its prefix to every
// Client that waited recently, for every key).
const releasedChannel = "redquorum:released:"

// wakeIdle is how long a key stays subscribed after its last wait.
var wakeIdle = 5 * time.Second // a variable for the tests

// waker is a Client's pub/sub subscriptions and the Lock calls waiting for a
// key's release. Its zero value is ready to use.
type waker struct {
	mu      sync.Mutex
	closed  bool
	subs    []*redis.PubSub       // one per node but Rings while a key is subscribed, else nil
	keys    map[string]time.Time  // subscribed keys (as on the nodes) and their last wait (monotonic)
	waiters map[string]*wakeEntry // by key on the nodes
	wg      sync.WaitGroup        // the listeners and the (un)subscribing goroutines
	idle    *time.Timer           // drops the keys not waited for in wakeIdle
}

// wakeEntry is the channel of the Lock calls waiting for one key's release,
// closed when a node announces it, and how many are waiting.
type wakeEntry struct {
	ch chan struct{}
	n  int
}

// wakeOn returns a channel that is closed when a node announces the release
// of rkey, subscribing to it if need be; nil after Close. Call wakeDone when
// the wait is over.
func (c *Client) wakeOn(rkey string) <-chan struct{} {
	w := &c.wake
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	if w.subs == nil {
		for _, n := range c.nodes {
			if _, ring := n.(*redis.Ring); ring {
				// A Ring routes a channel by its name, not to the shard
				// of the key whose release is published there (and
				// panics on a subscription without a channel): its
				// waiters rely on the other nodes and the timed retry.
				continue
			}
			ps := n.Subscribe(context.Background()) // no channel yet: connects on the first
			w.subs = append(w.subs, ps)
			w.wg.Go(func() { w.listen(ps) })
		}
		if w.idle == nil {
			w.idle = time.AfterFunc(wakeIdle, w.dropIdle)
		} else {
			w.idle.Reset(wakeIdle)
		}
	}
	if len(w.subs) > 0 { // none when every node is a Ring
		if w.keys == nil {
			w.keys = map[string]time.Time{}
		}
		if _, ok := w.keys[rkey]; !ok {
			// In the background, each node on its own: a node that is
			// down would hold this Lock, or the other nodes'
			// subscriptions, for its dial. go-redis subscribes again
			// after a reconnect.
			for _, ps := range w.subs {
				w.wg.Go(func() { _ = ps.Subscribe(context.Background(), releasedChannel+rkey) })
			}
		}
		w.keys[rkey] = time.Now()
	}
	if w.waiters == nil {
		w.waiters = map[string]*wakeEntry{}
	}
	e := w.waiters[rkey]
	if e == nil {
		e = &wakeEntry{ch: make(chan struct{})}
		w.waiters[rkey] = e
	}
	e.n++
	return e.ch
}

// wakeDone ends a wait that wakeOn(rkey) began and returned ch for.
func (c *Client) wakeDone(rkey string, ch <-chan struct{}) {
	w := &c.wake
	w.mu.Lock()
	defer w.mu.Unlock()
	if e := w.waiters[rkey]; e != nil && e.ch == ch {
		if e.n--; e.n == 0 {
			delete(w.waiters, rkey)
		}
	}
}

// listen wakes the waiters of every released key announced on ps until ps
// is closed.
func (w *waker) listen(ps *redis.PubSub) {
	for {
		msg, err := ps.ReceiveMessage(context.Background())
		w.mu.Lock()
		closed := w.closed
		if err == nil {
			rkey := strings.TrimPrefix(msg.Channel, releasedChannel)
			if e := w.waiters[rkey]; e != nil {
				close(e.ch)
				delete(w.waiters, rkey)
			}
		}
		current := slices.Contains(w.subs, ps)
		w.mu.Unlock()
		if closed || !current {
			return // Close, or dropIdle
		}
		if err != nil {
			time.Sleep(100 * time.Millisecond) // the node is down: go-redis reconnects on the next receive
		}
	}
}

// dropIdle unsubscribes the keys that no Lock waits for and none has waited
// for in wakeIdle, and closes the connections when no key is left; it runs
// again later while keys are left. The next wait subscribes anew.
func (w *waker) dropIdle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.subs == nil {
		return
	}
	now := time.Now()
	var drop []string
	next := wakeIdle
	for k, last := range w.keys {
		if left := wakeIdle - now.Sub(last); left > 0 || w.waiters[k] != nil {
			next = min(next, max(left, wakeIdle/10))
			continue
		}
		delete(w.keys, k)
		drop = append(drop, releasedChannel+k)
	}
	if len(w.keys) == 0 {
		for _, ps := range w.subs {
			_ = ps.Close() // ends ReceiveMessage; the listener sees it is no longer current
		}
		w.subs = nil
		return
	}
	w.idle.Reset(next)
	if len(drop) > 0 {
		for _, ps := range w.subs {
			w.wg.Go(func() { _ = ps.Unsubscribe(context.Background(), drop...) })
		}
	}
}

// close stops the listeners and waits for them. Waiters are not woken: their
// timed retries find the Client closed.
func (w *waker) close() {
	w.mu.Lock()
	w.closed = true
	subs := w.subs
	if w.idle != nil {
		w.idle.Stop()
	}
	w.mu.Unlock()
	for _, ps := range subs {
		_ = ps.Close() // ends ReceiveMessage
	}
	w.wg.Wait()
}

// wakeJitter waits a random moment of up to one round's duration (and at
// most MinRetryDelay) after a wake, so that clients in separate processes
// woken by the same message do not all send their rounds at once and split
// the nodes' votes: spread over a round's duration, the first to arrive
// usually finds the nodes free and the others find them taken.
func wakeJitter(c *Client, round time.Duration) {
	if d := retry.Jitter(min(round, c.cfg.minRetry)); d > 0 {
		<-c.cfg.clock.After(d)
	}
}
