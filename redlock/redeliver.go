package redlock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/retry"
	"github.com/redquorum/redquorum/internal/scripts"
)

// A release that gets no answer from its node (a timeout, a refused or
// broken connection) leaves the node in doubt: the keys may hold the token
// until their TTL, and an acquire that the network still holds may land
// later. So the release is sent again in the background until the node
// answers it or the lock's TTL has passed since it first failed. An answer
// settles the node either way: the release deletes the keys that hold the
// token, and where a key is missing it leaves a tombstone that refuses this
// token's late SET for the TTL (release.lua). Without this, a partition that
// swallows a failed round's release as well as its acquire leaves, once it
// heals, a key that nobody holds until its TTL.
//
// Each node has one queue and, while the queue is not empty, one goroutine
// that retries it with a doubling delay; an answered or expired release
// leaves the queue, and the goroutine ends with the queue. An attempt sends
// the oldest release alone and, if the node answers it, the rest as one
// pipeline; it takes one of the node's request slots (Client.enter), and
// a node whose slots are all taken is left for the next attempt. Close
// makes one last attempt for what is queued, at once, and waits for it (at
// most redeliverTimeout). What it could not deliver, and a queue that
// overflows, are logged at Debug level: the keys expire with their TTL,
// as they would without redelivery.

// redeliveryLimit bounds a node's queue: beyond it, the oldest releases are
// dropped (their keys expire with their TTL, as without redelivery).
var redeliveryLimit = 4096 // a variable for the tests

// Redelivery delays: the first retry comes after redeliverFirst, then the
// delay doubles up to redeliverMax. Variables for the tests.
var (
	redeliverFirst = 50 * time.Millisecond
	redeliverMax   = 2 * time.Second
)

// redelivery is one node's queue of releases in doubt.
type redelivery struct {
	mu       sync.Mutex
	pending  []pendingRelease
	running  bool // a goroutine retries the queue
	dropping bool // the queue has overflowed since it was last empty (warned once)
}

type pendingRelease struct {
	args  []any     // the release's EVALSHA arguments, as first sent
	until time.Time // give up after this (the lock's TTL after the first failure)
}

// inDoubt reports whether err, a release's failure, leaves the node in
// doubt: no answer came, or an error reply that says the script did not run
// for now (a node loading its data, busy with a long script, or a Cluster
// between states). Other error replies (a missing ACL permission, say) are
// answers: sending the release again would get the same.
func inDoubt(err error) bool {
	if err == nil || errors.Is(err, errNotOurs) || errors.Is(err, errSkipped) {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return true // a timeout, a dial or connection failure, a closed pool
	}
	for _, p := range []string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "MOVED", "ASK", "NOSCRIPT"} {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// redeliver queues l's release (args) to node i for retries, after a failure
// in doubt. It is called from a release call, which the Client tracks, so
// Close has not finished waiting for its background work.
func (c *Client) redeliver(i int, l *Lock, args []any, cause error) {
	if c.closing() {
		return // Close is making its last attempts or has made them
	}
	ttl := time.Duration(l.ttlArg.(int64)) * time.Millisecond
	q := &c.redeliveries[i]
	q.mu.Lock()
	if len(q.pending) >= redeliveryLimit {
		if !q.dropping {
			c.cfg.log.Debug("redlock: too many releases in doubt on one node: the oldest are dropped and their keys expire with their TTL",
				"addr", c.addrs[i], "limit", redeliveryLimit)
		}
		q.dropping = true
		q.pending = q.pending[1:]
	}
	q.pending = append(q.pending, pendingRelease{args: args, until: time.Now().Add(ttl)})
	start := !q.running
	q.running = true
	q.mu.Unlock()
	c.cfg.log.Debug("redlock: release in doubt, retrying in the background", "addr", c.addrs[i], "key", l.name(), "err", cause)
	if start {
		c.bg.Add(1) // the calling release holds bg above zero: Close is still waiting
		go c.redeliverLoop(i)
	}
}

// closing reports whether Close has begun.
func (c *Client) closing() bool {
	select {
	case <-c.closeCh:
		return true
	default:
		return false
	}
}

// redeliverLoop retries node i's queue until it is empty, or once more when
// Close begins.
func (c *Client) redeliverLoop(i int) {
	defer c.bg.Done()
	q := &c.redeliveries[i]
	delay := redeliverFirst
	t := time.NewTimer(retry.Jitter(delay) + delay/2)
	defer t.Stop()
	for {
		last := false
		select {
		case <-t.C:
		case <-c.closeCh:
			last = true
		}
		q.mu.Lock()
		now := time.Now()
		batch := q.pending[:0:0]
		for _, p := range q.pending {
			if now.Before(p.until) {
				batch = append(batch, p)
			}
		}
		q.pending = nil
		q.mu.Unlock()
		left := c.redeliverBatch(i, batch, last)
		q.mu.Lock()
		q.pending = append(left, q.pending...)
		if last || len(q.pending) == 0 {
			if last && len(q.pending) > 0 {
				c.cfg.log.Debug("redlock: Close could not deliver releases in doubt: their keys expire with their TTL",
					"addr", c.addrs[i], "count", len(q.pending))
			}
			q.pending, q.running, q.dropping = nil, false, false
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		if len(left) == 0 {
			delay = redeliverFirst // the node answered; what is queued now is new
		} else {
			delay = min(2*delay, redeliverMax)
		}
		t.Reset(delay/2 + retry.Jitter(delay))
	}
}

// redeliverBatch sends batch to node i and returns the releases still in
// doubt. The first goes alone (it also loads the script on a node that lost
// it); if the node answers it, the rest go as one pipeline, so that a slow
// node drains its queue in a round trip or two. The attempt's time is
// bounded by redeliverTimeout.
func (c *Client) redeliverBatch(i int, batch []pendingRelease, last bool) []pendingRelease {
	if len(batch) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.redeliverTimeout())
	defer cancel()
	// One of the node's request slots (see Client.enter): a redelivery
	// must not push the node's requests beyond its connection pool. When
	// the node is saturated there is no attempt this time, except Close's
	// last, which waits for a slot.
	if s := c.slots[i]; s != nil {
		if last {
			select {
			case s <- struct{}{}:
			case <-ctx.Done():
				return batch
			}
		} else {
			select {
			case s <- struct{}{}:
			default:
				return batch
			}
		}
		defer func() { <-s }()
	}
	if _, err := scripts.RunInt(ctx, c.nodes[i], batch[0].args); inDoubt(err) {
		return batch // still unreachable
	}
	rest := batch[1:]
	if len(rest) == 0 {
		return nil
	}
	pipe := c.nodes[i].Pipeline()
	cmds := make([]*redis.IntCmd, len(rest))
	for k, p := range rest {
		cmds[k] = redis.NewIntCmd(ctx, p.args...)
		_ = pipe.Process(ctx, cmds[k])
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	var left []pendingRelease
	for k, cmd := range cmds {
		if inDoubt(cmd.Err()) {
			left = append(left, rest[k])
		}
	}
	return left
}

// redeliverTimeout bounds one redelivery attempt to a node, and so how long
// Close waits for a node that does not answer. It is longer than the node
// timeout: nothing waits for a redelivery but Close, and a node slower than
// the node timeout should still get its releases.
func (c *Client) redeliverTimeout() time.Duration {
	return max(4*c.cfg.nodeTimeout, 500*time.Millisecond)
}
