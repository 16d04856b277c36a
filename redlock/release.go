package redlock

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redquorum/redquorum/internal/node"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/waiting"
	"github.com/redquorum/redquorum/quorum"
)

// handover is a lock that its holder handed over with its turn in the
// local queue: the next caller's first round takes keys that hold Token as
// free, then releases what is left of it.
type handover struct {
	Token string
	TTL   time.Duration // the lock's TTL, for the tombstones of its release
	// Acquire is the round that obtained the lock: it tells, per node,
	// whether its acquire set the keys. Its answers may still be coming,
	// for at most AcquireTimeout and the Client's linger after it. The
	// next caller's acquire on a node, and the release of what is left of
	// the lock, wait for that node's answer, so that neither overtakes the
	// lock's own acquire. The release skips the nodes that refused.
	Acquire        *quorum.Round
	AcquireTimeout time.Duration
	// join is what the acquire told the waiting strategy on the nodes,
	// which decides what the release sends to the nodes that refused it
	// (see waiting.Strategy.Refused).
	join protocol.Join
}

// release sends the token-guarded release of r's keys to every node in
// parallel (see releaseLock), and publishes it to waiting clients
// (internal/wake). unlock is false for the clean-up of a failed round,
// which hands no key off (protocol.Release.Clean). It returns the round
// without waiting for it; its calls belong to the Client. lat, when not
// nil, receives each node's latency (see timed). Callers are within
// c.life.enter.
func (c *Client) release(ctx context.Context, r *round, unlock bool, lat []time.Duration) *quorum.Round {
	// The ttl makes the script leave a tombstone where a key is missing,
	// against a late SET of this token (release.lua).
	var cmd protocol.Cmd
	if r.cmd != nil {
		cmd = c.proto.ReleaseAfter(r.cmd, protocol.Release{Announce: true, Clean: !unlock}) // shares the acquire's boxed keys, token and ttl
	} else {
		cmd = c.proto.Release(protocol.Release{Keys: r.storedKeys(), Token: r.acq.Token, TTL: r.acq.TTL, Announce: true, Clean: !unlock})
	}
	h := r.handover()
	if !unlock {
		h.join = protocol.Join{} // a failed round's clean-up: what it joined stays, for its waiter's next round
	}
	return c.releaseLock(detach(ctx), cmd, r.name(), h, nil, lat)
}

// releaseHandedOver releases prev, a lock that Unlock handed over to a
// waiter of this Client, once next, the waiter's first round on the same
// keys, has run. Where next was granted after prev's acquire was (see
// round.tookHandover), next took prev's keys over and nothing is left of prev.
// Elsewhere prev's keys may remain: where next was refused, or where
// prev's acquire landed after next's (which took the free key, perhaps
// releasing it since). Where prev's acquire joined the line for a handoff,
// a release may since have handed the key to it; an announced release takes
// that off (see waiting.Strategy.Refused). Callers are within c.life.enter.
func (c *Client) releaseHandedOver(next *round, prev handover) {
	cmd := c.proto.Release(protocol.Release{Keys: next.storedKeys(), Token: prev.Token, TTL: prev.TTL, Announce: joinedRefused(c.wait, prev)})
	c.releaseLock(context.Background(), cmd, next.name(), prev, next, nil)
}

// releaseUnclaimed releases h, a lock on keys that Unlock handed over to a
// caller that gave up at the same moment, and announces it like an Unlock.
// On a closed Client it sends nothing, and the keys expire with their TTL.
func (c *Client) releaseUnclaimed(keys []string, h handover) {
	c.releaseAside(strings.Join(keys, ", "), protocol.Release{Keys: c.storedKeys(keys, 0), Token: h.Token, TTL: h.TTL, Announce: true}, h)
}

// releaseAside sends rel, a release outside any lock call (named name), as
// releaseLock does for the lock h, and does not wait for it. On a closed
// Client it sends nothing: the keys, and the entries in line, expire.
func (c *Client) releaseAside(name string, rel protocol.Release, h handover) {
	if err := c.life.enter(); err != nil {
		return
	}
	defer c.life.exit()
	c.releaseLock(context.Background(), c.proto.Release(rel), name, h, nil, nil)
}

// releaseLock sends cmd, the release of the lock h (named name), to every
// node in parallel. On each node it waits for h's acquire to answer, so
// that it never overtakes it. It skips the nodes where that acquire did not
// set the keys, and those where after, a later round on the same keys, took
// them over (see round.tookHandover). The wait for an acquire is bounded by its
// call timeout and the linger after it (see Client.start), and the release
// still has a node timeout after that. lat is as for release.
func (c *Client) releaseLock(ctx context.Context, cmd protocol.Cmd, name string, h handover, after *round, lat []time.Duration) *quorum.Round {
	timeout := c.cfg.nodeTimeout
	if h.Acquire != nil && !h.Acquire.AllDone() {
		timeout += h.AcquireTimeout + c.cfg.linger
	}
	if after != nil && !after.calls.AllDone() {
		timeout += after.callTimeout + c.cfg.linger
	}
	atRefused, toRefused := c.wait.Refused(h.Token, h.join) // what the nodes that refused h's acquire are sent
	// A hand value's tombstone would refuse only an acquire of the hand
	// value, which only the lock's top-up sends (see topUp), once per node:
	// a handoff that sets a hand value reads no tombstone. So a hand
	// value's release leaves one only where the top-up's acquire is in
	// doubt, instead of on every node where the key is free; on a hot key
	// they would otherwise pile up, and every grant and handoff there reads
	// them all.
	var bare protocol.Cmd
	if strings.HasPrefix(h.Token, protocol.HandPrefix) {
		bare = protocol.WithoutTombstones(cmd)
	}
	return c.start(ctx, timeout, timed(lat, func(ctx context.Context, i int) error {
		cmd := cmd
		if bare != nil && (h.Acquire == nil || granted(h.Acquire.Outcome(i))) {
			cmd = bare // no top-up acquire there, or one that answered
		}
		if h.Acquire != nil && refused(h.Acquire.Outcome(i)) {
			if !toRefused {
				return errSkipped // the lock never held the keys there
			}
			rel := atRefused // each node's own: the calls run at once
			rel.Keys = cmdKeys(cmd)
			cmd = c.proto.Release(rel)
		}
		if after != nil && granted(after.calls.Outcome(i)) && after.tookHandover(i) {
			return errSkipped // the keys hold after's token, or after released them
		}
		return c.nodes[i].Release(ctx, cmd, h.TTL, name)
	}))
}

// tookHandover reports whether r's acquire on node i, where it was
// granted, took every key of the handed-over lock. It did when that lock's
// acquire had been granted on the node before r's was sent, or made no
// calls (a lock handed off on the nodes). Otherwise the older acquire may
// have landed after r's, on a key that r took while free and perhaps
// released since.
func (r *round) tookHandover(i int) bool {
	return r.handedOver == nil || i < 64 && r.handedOverGranted.Load()&(1<<i) != 0
}

// detach returns ctx without its cancellation and deadline: a release
// outlives the caller's ctx.
func detach(ctx context.Context) context.Context {
	if _, ok := ctx.Deadline(); ok || ctx.Done() != nil {
		return context.WithoutCancel(ctx)
	}
	return ctx
}

// detachedCtx is what [context.WithoutCancel] returns, as a value that a
// round keeps, so that detaching a round's calls costs no allocation. Its
// Done is nil, so a context derived from it never waits on parent. One
// difference: context.Cause of it is parent's cause (WithoutCancel's is
// nil); nothing asks, and a context derived from it has its own.
type detachedCtx struct{ parent context.Context }

func (*detachedCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*detachedCtx) Done() <-chan struct{}       { return nil }
func (*detachedCtx) Err() error                  { return nil }
func (d *detachedCtx) Value(key any) any         { return d.parent.Value(key) }

// detachIn is detach with d, a value the caller keeps (see detachedCtx).
func detachIn(d *detachedCtx, ctx context.Context) context.Context {
	if _, ok := ctx.Deadline(); ok || ctx.Done() != nil {
		d.parent = ctx
		return d
	}
	return ctx
}

// granted reports whether an acquire's outcome says that the node set the
// keys.
func granted(err error) bool { return err == nil || errors.Is(err, ErrFenceUnknown) }

// handover returns the lock that r obtained as Unlock hands it over: its
// token and TTL, its acquire round, for the release of what is left, and
// what that round told the waiting strategy.
func (r *round) handover() handover {
	return handover{Token: r.acq.Token, TTL: r.acq.TTL, Acquire: r.calls, AcquireTimeout: r.callTimeout, join: r.acq.Join}
}

// joinedRefused reports whether the release of h goes to the nodes that
// refused its acquire too (see waiting.Strategy.Refused): the lock's round joined
// something there that its release takes back.
func joinedRefused(s waiting.Strategy, h handover) bool {
	_, ok := s.Refused(h.Token, h.join)
	return ok
}

// cmdKeys returns the keys of cmd, a release.
func cmdKeys(cmd protocol.Cmd) []string {
	keys := make([]string, cmd[2].(int))
	for i := range keys {
		keys[i] = cmd[3+i].(string)
	}
	return keys
}

// refused reports whether an acquire's outcome says that the node did not
// set the keys.
func refused(err error) bool {
	return errors.Is(err, ErrTaken) || errors.Is(err, ErrGuarded) || err == node.ErrNotSent || err == errGone || errors.Is(err, ErrLimitMismatch)
}
