package node

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/retry"
)

// A release that gets no answer from its node (a timeout, a refused or
// broken connection) leaves the node in doubt. The keys may hold the token
// until their TTL, and an acquire that the network still holds may land
// later. So the release is sent again in the background, until the node
// answers it or the lock's TTL has passed since it first failed. An answer
// settles the node either way. The release deletes the keys that hold the
// token. Where a key is missing, it leaves a tombstone that refuses this
// token's late SET for the TTL (release.lua). Without redelivery, a partition
// that swallows a failed round's release as well as its acquire leaves a key
// that nobody holds until its TTL, once it heals.
//
// Each node has one backlog. While it is not empty, one goroutine retries it
// with a doubling delay, from Config.RedeliverFirst up to Config.RedeliverMax.
// An answered or expired release leaves the backlog, and the goroutine ends
// with the backlog. An attempt sends the oldest release alone. If the node
// answers it, the attempt sends the rest as one pipeline. It takes one of the
// node's request slots (Node.enter); a node whose slots are all taken is left
// for the next attempt. When Config.Closing is closed, the goroutine makes one
// last attempt at once, bounded by Config.RedeliverTimeout, and ends.
// [Node.Wait] waits for it. A release that fails after that makes its last
// attempt at once, in its own call. What it could not deliver is logged at
// Debug level, and so is a backlog that overflows (Config.RedeliveryLimit).
// Their keys expire with their TTL, as they would without redelivery.

// redelivery is one node's backlog of releases in doubt.
type redelivery struct {
	mu       sync.Mutex
	pending  []pendingRelease
	running  bool // a goroutine retries the backlog
	dropping bool // the backlog has overflowed since it was last empty (warned once)
	wg       sync.WaitGroup
}

type pendingRelease struct {
	cmd   protocol.Cmd // the release, as first sent
	until time.Time    // give up after this (the lock's TTL after the first failure)
}

// inDoubt reports whether err, a release's failure, leaves the node in doubt.
// It does when no answer came, or when an error reply says that the script
// did not run for now. That is a node loading its data, busy with a long
// script, or a Cluster between states. Other error replies, such as a missing
// ACL permission, are answers: sending the release again would get the same.
func inDoubt(err error) bool {
	if err == nil || errors.Is(err, ErrNotOurs) {
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

// redeliver adds a release (cmd, of a lock with ttl named key) for
// retries, after a failure in doubt. It is called from a release call,
// which the client waits for before it waits for the node.
func (n *Node) redeliver(cmd protocol.Cmd, ttl time.Duration, key string, cause error) {
	if n.closing() {
		// The client is closing and makes its last attempts: make this
		// release's now, in the call that failed, which Close waits for.
		if left := n.redeliverBatch([]pendingRelease{{cmd: cmd, until: n.cfg.Clock.Now().Add(ttl)}}, true); len(left) > 0 {
			n.cfg.Log.Debug("redlock: Close could not deliver a release in doubt: its keys expire with their TTL", "node", n.name, "key", key)
		}
		return
	}
	q, limit := &n.redo, n.cfg.RedeliveryLimit
	q.mu.Lock()
	if len(q.pending) >= limit {
		if !q.dropping {
			n.cfg.Log.Debug("redlock: too many releases in doubt on one node: the oldest are dropped and their keys expire with their TTL",
				"node", n.name, "limit", limit)
		}
		q.dropping = true
		q.pending = q.pending[1:]
	}
	q.pending = append(q.pending, pendingRelease{cmd: cmd, until: n.cfg.Clock.Now().Add(ttl)})
	start := !q.running
	q.running = true
	if start {
		q.wg.Add(1)
	}
	q.mu.Unlock()
	n.cfg.Log.Debug("redlock: release in doubt, retrying in the background", "node", n.name, "key", key, "err", cause)
	if start {
		go n.redeliverLoop()
	}
}

// closing reports whether the client has begun to close.
func (n *Node) closing() bool {
	select {
	case <-n.cfg.Closing:
		return true
	default:
		return false
	}
}

// redeliverLoop retries the node's backlog until it is empty, or once more
// when the client begins to close.
func (n *Node) redeliverLoop() {
	q := &n.redo
	defer q.wg.Done()
	delay := n.cfg.RedeliverFirst
	wait := delay/2 + retry.Jitter(delay)
	for {
		last := false
		select {
		case <-n.cfg.Clock.After(wait):
		case <-n.cfg.Closing:
			last = true
		}
		left := n.redeliverBatch(q.take(n.cfg.Clock.Now()), last)
		if q.putBack(left, last) {
			if last && len(left) > 0 {
				n.cfg.Log.Debug("redlock: Close could not deliver releases in doubt: their keys expire with their TTL",
					"node", n.name, "count", len(left))
			}
			return
		}
		if len(left) == 0 {
			delay = n.cfg.RedeliverFirst // the node answered; the backlog now is new
		} else {
			delay = min(2*delay, n.cfg.RedeliverMax)
		}
		wait = delay/2 + retry.Jitter(delay)
	}
}

// take empties the backlog and returns its releases still within their TTL.
func (q *redelivery) take(now time.Time) []pendingRelease {
	q.mu.Lock()
	defer q.mu.Unlock()
	batch := q.pending[:0:0]
	for _, p := range q.pending {
		if now.Before(p.until) {
			batch = append(batch, p)
		}
	}
	q.pending = nil
	return batch
}

// putBack puts left, the releases still in doubt, ahead of those added
// meanwhile. It reports whether the loop ends: on its last attempt, or with
// nothing in the backlog; the backlog is then reset.
func (q *redelivery) putBack(left []pendingRelease, last bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pending = append(left, q.pending...)
	if !last && len(q.pending) > 0 {
		return false
	}
	q.pending, q.running, q.dropping = nil, false, false
	return true
}

// redeliverBatch sends batch to the node and returns the releases still in
// doubt. The first goes alone, which also loads the script on a node that
// lost it. If the node answers it, the rest go as one pipeline, so that a
// slow node drains its backlog in a round trip or two. Config.RedeliverTimeout
// bounds the attempt.
func (n *Node) redeliverBatch(batch []pendingRelease, last bool) []pendingRelease {
	if len(batch) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.RedeliverTimeout)
	defer cancel()
	// One of the node's request slots (see Node.enter): a redelivery must
	// not push the node's requests beyond its connection pool. When the
	// node is saturated there is no attempt this time, except the last,
	// which waits for a slot.
	if !n.trySlot(ctx, last) {
		return batch
	}
	defer n.exit()
	if _, err := n.cfg.Protocol.RunInt(ctx, n.client, batch[0].cmd); inDoubt(err) {
		return batch // still unreachable
	}
	return n.pipeline(ctx, batch[1:])
}

// pipeline sends rest as one pipeline and returns the releases still in
// doubt.
func (n *Node) pipeline(ctx context.Context, rest []pendingRelease) []pendingRelease {
	if len(rest) == 0 {
		return nil
	}
	pipe := n.client.Pipeline()
	cmds := make([]*redis.IntCmd, len(rest))
	for k, p := range rest {
		cmds[k] = redis.NewIntCmd(ctx, p.cmd...)
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

// trySlot takes one of the node's request slots for a redelivery attempt,
// and reports whether it did. It tries once, or, for the last attempt
// (wait), waits until ctx is done.
func (n *Node) trySlot(ctx context.Context, wait bool) bool {
	if n.slots == nil {
		return true
	}
	if wait {
		select {
		case n.slots <- struct{}{}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	select {
	case n.slots <- struct{}{}:
		return true
	default:
		return false
	}
}
