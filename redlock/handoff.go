package redlock

import (
	"context"
	"time"

	"github.com/redquorum/redquorum/internal/alloc"
	"github.com/redquorum/redquorum/internal/node"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/quorum"
)

// The lock that a handoff on the node gives a waiter (see waiter.handedLock
// and docs/DESIGN.md, "Handoff on the node").

// handedRound returns the record of a lock that a quorum of nodes handed
// over on the node (see waiter.handedLock): keys hold token, a hand value,
// since no earlier than start, and the lock is valid until until. It made
// no calls: the lock's release and extensions go to every node. j is the
// waiter's place, which its top-up takes off the queue (see topUp).
func (c *Client) handedRound(keys []string, ttl time.Duration, token string, start, until time.Time, j join) *round {
	r, replies := alloc.WithSlice[round, protocol.AcquireReply](len(c.nodes))
	r.c, r.keys, r.replies = c, keys, replies
	r.acq = protocol.Acquire{Keys: append(c.storedKeys(keys, 1), c.stateKey), Token: token, TTL: ttl, Join: j.protocol()}
	r.cmd = c.proto.AcquireCmd(r.acq) // for topUp; the release shares its values
	r.start, r.until = start, until
	r.decide()
	return r
}

// topUp sends r, a lock that the nodes in handed (a bit per node) handed
// over on the node, as an acquire of its hand value, in the background, to
// the nodes where last, the waiter's round that joined the queue, was
// granted (and released with the failed round) or not sent: those will not
// hand it over. A node whose answer to last is missing or an error is
// left alone: the round's request may still land there. (The others that have not announced the handoff yet are
// only slower.) A node where the key is free (it had deleted it
// because the waiter was not in its queue) then holds it for the lock too,
// and the lock's release hands it on there as well: without this, a node
// that once missed a handoff would grant every later waiter's round and
// its clean-up, and never take part in a handoff again, leaving the
// handoffs to a bare quorum of nodes, all of which a waiter must then hear.
// The acquire is an ordinary one (the validity is the handoff's, and a node
// that refuses changes nothing); the lock's release waits for it on each
// node, as for any round (see releaseLock).
func (c *Client) topUp(r *round, handed uint64, last *quorum.Round) {
	if c.cfg.noTopUp || last == nil || len(c.nodes) > 64 {
		return
	}
	var to uint64
	for i := range c.nodes {
		if handed&(1<<i) != 0 {
			continue
		}
		if res, done := last.Result(i); !done || (res != nil && res != node.ErrNotSent) {
			// The round joined there (the node is about to hand over too),
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
			return nil // handed over, or about to be
		}
		return r.acquireOn(ctx, i)
	})
}
