package redlock

import (
	"context"
	"time"

	"github.com/redquorum/redquorum/internal/alloc"
	"github.com/redquorum/redquorum/internal/node"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/waiting"
	"github.com/redquorum/redquorum/quorum"
)

// handedRound returns the record of h, a lock that a quorum of nodes
// handed off on the node (see internal/waiting, handWait.handed), with ttl,
// and acquires it in the background where it was not handed off (see
// topUp). keys hold h.Token, a hand value. The round made no calls, so the
// lock's release and extensions go to every node. h.Join is the waiter's
// place, which its top-up takes off the line.
func (c *Client) handedRound(keys []string, ttl time.Duration, h *waiting.Hand) *round {
	r, replies := alloc.WithSlice[round, protocol.AcquireReply](len(c.nodes))
	r.c, r.keys, r.replies = c, keys, replies
	r.acq = protocol.Acquire{Keys: append(c.storedKeys(keys, 1), c.stateKey), Token: h.Token, TTL: ttl, Join: h.Join}
	r.cmd = c.proto.AcquireCmd(r.acq) // for topUp; the release shares its values
	r.start, r.until = h.Start, h.Until
	r.decide()
	c.topUp(r, h.Nodes, h.Last)
	return r
}

// topUp acquires r's hand value, in the background, on the nodes that will
// not hand the key off. r is a lock that the nodes in handed (a bit per
// node) handed off. Those are the nodes where last, the waiter's round that
// joined the line, was granted (and released as failed) or not sent. A node
// whose answer to last is missing or an error is left alone: the request
// may still land there. Where the acquire is granted, the lock's release
// hands the key off too. Without this, a node that missed one handoff would
// take part in none again, leaving a bare quorum that every waiter must
// hear. A refusal changes nothing, the validity stays the handoff's, and
// the lock's release waits for the acquire (see releaseLock).
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
			// The round joined there (the node is about to hand off too),
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
	r.calls = c.start(context.Background(), r.callTimeout, func(ctx context.Context, i int) error {
		if to&(1<<i) == 0 {
			return nil // handed off, or about to be
		}
		return r.acquireOn(ctx, i)
	})
}
