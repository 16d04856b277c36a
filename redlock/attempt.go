package redlock

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/waiting"
	"github.com/redquorum/redquorum/quorum"
)

// attempt makes one lock round: two with fencing, three when the first
// finds a brand-new deployment. When prev.Token is not "", it takes over
// the keys of prev, a lock handed over by Unlock, then releases what is
// left of prev. On a closed Client it sends nothing, and prev's keys
// expire. On failure it also returns how long until the holder's keys have
// expired on enough nodes for a quorum, or 0 when unknown. A lock obtained
// once Close has begun is released, and the error is ErrClosed. j is the
// round's place in the line of waiters; layer, for a semaphore's or a
// read-write lock's round, what it tells the limit layer on the nodes (zero
// for a lock's); rec, when not nil, records the rounds.
func (c *Client) attempt(ctx context.Context, keys []string, ttl time.Duration, prev handover, after *quorum.Round, j waiting.Join, layer protocol.Layer, rec *record) (*Lock, time.Duration, *quorum.Round, error) {
	if err := c.life.enter(); err != nil {
		return nil, 0, nil, err
	}
	defer c.life.exit()
	r, err := c.round(ctx, keys, ttl, nil, prev, after, j, layer, rec)
	est := c.newDeployment(r, err)
	shortcut := est != nil && ctx.Err() == nil
	kind := acquireRound
	if shortcut {
		kind = shortcutRound
	}
	rec.addAcquire(r, kind)
	if shortcut {
		// Every node is guarded at once: a new deployment. Mark each
		// node's state with the ids seen, each only if it still has the
		// state we saw and no other mark; then, once all are marked, end
		// the guard on each that still carries the mark (docs/SAFETY.md,
		// "The new-deployment shortcut"). A node out of its guard grants
		// either round as usual.
		j.Token = "" // each round's token is spent: a slow node may have its tombstone
		r, err = c.round(ctx, keys, ttl, est, prev, cleanupOf(err), j, layer, rec)
		marked := err != nil && ctx.Err() == nil && r.marked()
		if marked {
			rec.addAcquire(r, shortcutRound)
		} else {
			rec.addAcquire(r, acquireRound)
		}
		if marked {
			est = slices.Clone(est) // the marking round's stays as sent
			for i := range est {
				est[i].Establish = true
			}
			// The establishing round is an ordinary one: it decides at the
			// quorum, and a slow node's request ends that node's guard when
			// it arrives, if the state still carries the mark.
			r, err = c.round(ctx, keys, ttl, est, prev, cleanupOf(err), j, layer, rec)
			rec.addAcquire(r, establishRound)
		}
	}
	if prev.Token != "" {
		c.releaseHandedOver(r, prev)
	}
	if err != nil {
		return nil, r.freeIn(), r.calls, err
	}
	l, err := newLock(r)
	return l, 0, r.calls, err
}

// newError builds the Error of an operation from its round.
func (c *Client) newError(op, key string, ok int, r *quorum.Round, sentinel, cause error) *Error {
	e := &Error{Op: op, Key: key, Quorum: c.cfg.quorum, OK: ok, Nodes: make([]NodeResult, len(c.nodes)), sentinel: sentinel, cause: cause, round: r}
	if qe := (*quorum.Error)(nil); errors.As(cause, &qe) {
		e.ctx = qe.Ctx
	}
	c.fillNodes(e, r, cause)
	return e
}

// fillNodes sets each node's address and outcome in r on e.
func (c *Client) fillNodes(e *Error, r *quorum.Round, cause error) {
	for i, n := range c.nodes {
		e.Nodes[i].Addr = n.Name()
		res, done := r.Result(i)
		switch {
		case done:
			e.Nodes[i].Err = res
		case errors.Is(cause, quorum.ErrTimeout):
			e.Nodes[i].Err = quorum.ErrTimeout
		default:
			e.Nodes[i].Err = errPending
		}
	}
}

// cleanupOf returns the clean-up release of the failed lock round whose
// error err is, or nil.
func cleanupOf(err error) *quorum.Round {
	if e := (*Error)(nil); errors.As(err, &e) && e != nil {
		return e.cleanup
	}
	return nil
}
