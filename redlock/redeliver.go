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
// leaves the queue, and the goroutine ends with the queue. Close makes one
// last attempt for what is queued, at once, and waits for it.

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
	key   string    // for the log
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
	for _, p := range []string{"LOADING", "BUSY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "MOVED", "ASK"} {
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
			c.cfg.log.Warn("redlock: too many releases in doubt on one node: the oldest are dropped and their keys expire with their TTL",
				"addr", c.addrs[i], "limit", redeliveryLimit)
		}
		q.dropping = true
		q.pending = q.pending[1:]
	}
	q.pending = append(q.pending, pendingRelease{args: args, key: l.name(), until: time.Now().Add(ttl)})
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
		var left []pendingRelease
		for k, p := range batch {
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.nodeTimeout)
			_, err := scripts.RunInt(ctx, c.nodes[i], p.args)
			cancel()
			if err != nil && inDoubt(err) {
				left = batch[k:] // still unreachable: keep this one and the rest
				break
			}
		}
		q.mu.Lock()
		q.pending = append(left, q.pending...)
		if last || len(q.pending) == 0 {
			if last && len(q.pending) > 0 {
				c.cfg.log.Warn("redlock: Close could not deliver releases in doubt: their keys expire with their TTL",
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
