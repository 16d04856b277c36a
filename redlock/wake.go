package redlock

import (
	"context"
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
const releasedChannel = "redquorum:released:"

// waker is a Client's pub/sub listeners and the Lock calls waiting for a
// key's release. Its zero value is ready to use.
type waker struct {
	mu      sync.Mutex
	started bool
	closed  bool
	subs    []*redis.PubSub
	waiters map[string]chan struct{} // by key on the nodes; closed on a release
	wg      sync.WaitGroup           // the listeners
}

// on returns a channel that is closed when a node announces the release of
// rkey, starting the listeners if need be; nil after Close. The channel
// stays registered until it fires, so a retry loop calls on once per wake.
func (c *Client) wakeOn(rkey string) <-chan struct{} {
	w := &c.wake
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
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
	}
	if w.waiters == nil {
		w.waiters = map[string]chan struct{}{}
	}
	ch := w.waiters[rkey]
	if ch == nil {
		ch = make(chan struct{})
		w.waiters[rkey] = ch
	}
	return ch
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
			if ch := w.waiters[rkey]; ch != nil {
				close(ch)
				delete(w.waiters, rkey)
			}
		}
		w.mu.Unlock()
		if closed {
			return
		}
		if err != nil {
			time.Sleep(100 * time.Millisecond) // the node is down: go-redis reconnects on the next receive
		}
	}
}

// close stops the listeners and waits for them. Waiters are not woken: their
// timed retries find the Client closed.
func (w *waker) close() {
	w.mu.Lock()
	w.closed = true
	subs := w.subs
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
