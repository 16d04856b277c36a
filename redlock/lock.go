package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/scripts"
	"github.com/redquorum/redquorum/quorum"
)

// Lock is one held lock, returned by [Client.Lock] or [Client.TryLock]. Its
// methods are safe for concurrent use.
//
// A Lock is only as good as its validity: trust it until [Lock.Until], not
// after, and keep the work under it shorter than that (or [Lock.Extend] it).
type Lock struct {
	c     *Client
	key   string  // as given by the caller
	rkey  string  // with the prefix, as stored on the nodes
	token string  // 128 random bits
	held  []int64 // per node: the holder's TTL in ms reported by a refusing acquire
	acq   *quorum.Round
	turn  *turn // the local queue's turn this lock keeps (queue.go); nil for TryLock

	mu       sync.Mutex
	until    time.Time
	released bool
}

// Key returns the key as passed to Lock, without Options.KeyPrefix.
func (l *Lock) Key() string { return l.key }

// Token returns the random value that identifies this holder on the nodes.
func (l *Lock) Token() string { return l.token }

// Until returns the end of the lock's validity: the moment until which no
// other client can hold it, under the algorithm's assumptions. It reads the
// Client's clock, so compare it with that clock (time.Now for the default).
func (l *Lock) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Unlock releases the lock on every node with a token-guarded script: a node
// whose key holds another token is left alone. It returns once a quorum of
// nodes has released it (the rest complete in the background; see
// [Client.Close]), or an [*Error] wrapping [ErrNotHeld] when fewer than a
// quorum still held the token. After Unlock, the Lock cannot be extended.
func (l *Lock) Unlock(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return &Error{Op: "unlock", Key: l.key, Quorum: l.c.cfg.quorum, Reason: "already unlocked", sentinel: ErrNotHeld}
	}
	c := l.c
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return ErrClosed
	}
	l.released = true
	r := c.release(ctx, l)
	ok, err := r.Await(ctx, c.cfg.quorum)
	c.turns.leave(l.turn) // queue.go: the next local caller may start its rounds
	if err != nil {
		return c.newError("unlock", l.key, ok, r, ErrNotHeld, err)
	}
	return nil
}

// Extend sets the lock's TTL to ttl on every node that still holds its
// token and, if a quorum did so in time, moves [Lock.Until] to the start of
// the round plus the new validity. It first checks the lock's validity
// locally and does not contact the nodes when it has run out.
//
// On failure Until is unchanged, nothing is deleted on any node, and the
// error wraps [ErrNotHeld]: treat the lock as lost.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.c
	ttl, err := c.checkArgs(l.key, ttl)
	if err != nil {
		return err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return ErrClosed
	}
	start := c.cfg.clock.Now()
	if l.released || !start.Before(l.until) {
		reason := "validity ran out at " + l.until.String()
		if l.released {
			reason = "already unlocked"
		}
		return &Error{Op: "extend", Key: l.key, Quorum: c.cfg.quorum, Reason: reason, sentinel: ErrNotHeld}
	}
	args := scripts.Args(scripts.Extend, l.rkey, l.token, ttl.Milliseconds())
	r := quorum.Start(ctx, len(c.nodes), c.cfg.nodeTimeout, func(ctx context.Context, i int) error {
		if res, done := l.acq.Result(i); done && errors.Is(res, ErrTaken) {
			return errSkipped
		}
		v, err := scripts.RunInt(ctx, c.nodes[i], args)
		if err != nil {
			return err
		}
		if v == 0 {
			return errNotOurs
		}
		return nil
	})
	c.track(r)
	ok, qerr := r.Await(ctx, c.cfg.quorum)
	validity := clock.Validity(ttl, c.cfg.clock.Now().Sub(start), c.cfg.drift)
	if qerr != nil || validity <= 0 {
		e := c.newError("extend", l.key, ok, r, ErrNotHeld, qerr)
		if qerr == nil {
			e.Reason = fmt.Sprintf("the round took too long: validity %v", validity)
		}
		return e
	}
	l.until = start.Add(validity)
	return nil
}
