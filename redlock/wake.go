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
// listens on each node (one pattern subscription per node per Client,
// started at the first such wait) and retries as soon as a node announces
// that the key was released, instead of sleeping until its next retry. A
// missed message (a listener not yet subscribed, a broken connection, a
// holder whose key simply expires) only means waiting for the timed retry as
// before. Safety does not depend on the messages: they only trigger a round.
// The listeners stop once no Lock has waited for wakeIdle, so that a Client
// whose keys are no longer contended does not keep receiving (and parsing)
// every release announced under its prefix.
const releasedChannel = "redquorum:released:"

// wakeIdle is how long the listeners outlive the last wait.
var wakeIdle = 5 * time.Second // a variable for the tests

// waker is a Client's pub/sub listeners and the Lock calls waiting for a
// key's release. Its zero value is ready to use.
type waker struct {
	mu      sync.Mutex
	started bool
	closed  bool
	subs    []*redis.PubSub
	waiters map[string]*wakeEntry // by key on the nodes
	wg      sync.WaitGroup        // the listeners
	last    time.Time             // the last wait (monotonic)
	idle    *time.Timer           // stops the listeners after wakeIdle without waits
}

// wakeEntry is the channel of the Lock calls waiting for one key's release,
// closed when a node announces it, and how many are waiting.
type wakeEntry struct {
	ch chan struct{}
	n  int
}

// wakeOn returns a channel that is closed when a node announces the release
// of rkey, starting the listeners if need be; nil after Close. Call wakeDone
// when the wait is over.
func (c *Client) wakeOn(rkey string) <-chan struct{} {
	w := &c.wake
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	w.last = time.Now()
	if !w.started {
		w.started = true
		pattern := releasedChannel + c.cfg.prefix + "*"
		for _, n := range c.nodes {
			// PSubscribe connects in the background; a node that is down
			// is retried by go-redis on each receive.
			ps := n.PSubscribe(context.Background(), pattern)
			w.subs = append(w.subs, ps)
			w.wg.Go(func() { w.listen(ps) })
		}
		if w.idle == nil {
			w.idle = time.AfterFunc(wakeIdle, w.stopIfIdle)
		} else {
			w.idle.Reset(wakeIdle)
		}
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
			return // Close, or stopIfIdle
		}
		if err != nil {
			time.Sleep(100 * time.Millisecond) // the node is down: go-redis reconnects on the next receive
		}
	}
}

// stopIfIdle stops the listeners when no Lock is waiting and none has waited
// for wakeIdle; otherwise it checks again later. The next wait starts them
// anew.
func (w *waker) stopIfIdle() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || !w.started {
		return
	}
	if left := wakeIdle - time.Since(w.last); len(w.waiters) > 0 || left > 0 {
		w.idle.Reset(max(left, wakeIdle/10))
		return
	}
	w.started = false
	for _, ps := range w.subs {
		_ = ps.Close() // ends ReceiveMessage; the listener sees it is no longer current
	}
	w.subs = nil
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
