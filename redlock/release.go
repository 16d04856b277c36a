package redlock

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/queue"
	"github.com/redquorum/redquorum/quorum"
)

// release sends the token-guarded release of r's keys to every node in
// parallel, each after that node's acquire has answered, skipping the
// nodes that did not set the keys. announce (an Unlock, not the clean-up
// of a failed round) publishes the release to waiting clients
// (internal/wake). It returns the round without waiting for it; its calls
// belong to the Client. Callers are within c.life.enter.
func (c *Client) release(ctx context.Context, r *round, announce bool) *quorum.Round {
	// The ttl makes the script leave a tombstone where a key is missing,
	// against a late SET of this token (release.lua).
	var cmd protocol.Cmd
	if r.cmd != nil {
		cmd = c.proto.ReleaseAfter(r.cmd, announce) // shares the acquire's boxed keys, token and ttl
	} else {
		cmd = c.proto.Release(r.storedKeys(), r.acq.Token, r.acq.TTL, announce)
	}
	// The wait for an outstanding acquire is bounded by its own timeout;
	// a release sent after such a wait still has a node timeout left.
	timeout := c.cfg.nodeTimeout
	if !r.calls.AllDone() {
		timeout += r.callTimeout
	}
	name := r.name()
	return c.life.workers.Start(detach(ctx), len(c.nodes), timeout, func(ctx context.Context, i int) error {
		if refused(r.calls.Outcome(i)) {
			return errSkipped
		}
		return c.nodes[i].Release(ctx, cmd, r.acq.TTL, name)
	})
}

// releaseHandedOver releases prev, a lock that Unlock handed over to a
// waiter of this Client, once next, the waiter's first round on the same
// keys, has run: on the nodes where next was granted, the keys hold next's
// token and nothing is left of prev; on the others prev's keys may remain,
// and their release leaves a tombstone where a key is missing. obtained
// reports whether next obtained the lock; when it did not, next has
// released its own keys already and prev is released everywhere. Callers
// are within c.life.enter.
func (c *Client) releaseHandedOver(next *round, prev queue.Handover, obtained bool) {
	cmd := c.proto.Release(next.storedKeys(), prev.Token, prev.TTL, false)
	name := next.name()
	c.life.workers.Start(context.Background(), len(c.nodes), c.handoverTimeout(prev, next), func(ctx context.Context, i int) error {
		if !heldBy(prev, i) {
			return errSkipped // prev never held the keys there
		}
		if res := next.calls.Outcome(i); obtained && (res == nil || errors.Is(res, ErrFenceUnknown)) {
			return errSkipped // the keys hold next's token
		}
		return c.nodes[i].Release(ctx, cmd, prev.TTL, name)
	})
}

// detach returns ctx without its cancellation and deadline: a release
// outlives the caller's ctx.
func detach(ctx context.Context) context.Context {
	if _, ok := ctx.Deadline(); ok || ctx.Done() != nil {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

// releaseUnclaimed releases h, a lock on keys that Unlock handed over to a
// caller that gave up at the same moment, on every node, and announces it
// like an Unlock. It returns without waiting; on a closed Client it sends
// nothing, and the keys expire with their TTL.
func (c *Client) releaseUnclaimed(keys []string, h queue.Handover) {
	if err := c.life.enter(); err != nil {
		return
	}
	defer c.life.exit()
	stored := make([]string, len(keys))
	for i, k := range keys {
		stored[i] = c.stored(k)
	}
	cmd := c.proto.Release(stored, h.Token, h.TTL, true)
	name := strings.Join(keys, ", ")
	c.life.workers.Start(context.Background(), len(c.nodes), c.handoverTimeout(h, nil), func(ctx context.Context, i int) error {
		if !heldBy(h, i) {
			return errSkipped
		}
		return c.nodes[i].Release(ctx, cmd, h.TTL, name)
	})
}

// handover returns the lock that r obtained as Unlock hands it over.
func (r *round) handover() queue.Handover {
	return queue.Handover{Token: r.acq.Token, TTL: r.acq.TTL, Acquire: r.calls, AcquireTimeout: r.callTimeout}
}

// heldBy reports whether node i may hold the keys of h, waiting for the
// node's answer to h's acquire if it is still coming.
func heldBy(h queue.Handover, i int) bool {
	return h.Acquire == nil || !refused(h.Acquire.Outcome(i))
}

// handoverTimeout bounds a release of h that may first wait for h's
// acquire answers, and for those of next when not nil.
func (c *Client) handoverTimeout(h queue.Handover, next *round) time.Duration {
	t := c.cfg.nodeTimeout
	if h.Acquire != nil && !h.Acquire.AllDone() {
		t += h.AcquireTimeout
	}
	if next != nil && !next.calls.AllDone() {
		t += next.callTimeout
	}
	return t
}
