package redlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redquorum/redquorum/internal/queue"
	"github.com/redquorum/redquorum/internal/waiting"
)

// waitFor is how long a lock call waits for the lock.
type waitFor uint8

const (
	waitNot waitFor = iota // one round (TryLock)
	waitMax                // until ctx ends or, when ctx has no deadline, Options.MaxWait has passed (Lock)
	waitCtx                // until ctx ends (an election's Campaign)
)

// lockWait is how [Client.Lock] waits between its rounds. It first waits
// for its turn in the Client's local queue for the keys. After each failed
// round it waits as the Client's waiting strategy says (wt, with its
// waiter w: internal/waiting).
type lockWait struct {
	c        *Client
	wt       waiting.Wait
	w        *waiting.Waiter
	keys     []string
	turn     *queue.Turn[handover] // nil until the first next
	obtained *Lock
}

// newLockWait returns the wait of a Lock call for keys with ctx that
// began at began and waits as wait says.
func (c *Client) newLockWait(ctx context.Context, keys []string, began time.Time, wait waitFor) lockWait {
	_, hasDeadline := ctx.Deadline()
	wt := c.wait.Wait(ctx, keys, began, hasDeadline || wait == waitCtx)
	return lockWait{c: c, wt: wt, w: wt.Waiter(), keys: keys}
}

// next waits for the next chance to try. The first call waits for the
// caller's turn in the local queue, and returns the lock handed over with
// the turn, if any. Each later call follows a failed round: last is its
// error, and hint when it found the holder's keys free (0: unknown). It
// returns an error for Lock to return when the caller must give up: ctx
// ended, MaxWait passed, or the Client was closed (at once, not at the
// next round).
func (lw *lockWait) next(ctx context.Context, last *Error, hint time.Duration) (handover, error) {
	if lw.turn == nil {
		h, err := lw.queued(ctx)
		if err == nil && h.Token == "" {
			if err = lw.wt.First(); err != nil {
				err = lw.c.waitErr(err, &Error{Op: "lock", Key: strings.Join(lw.keys, ", "), Quorum: lw.c.cfg.quorum, sentinel: ErrNotObtained,
					Reason: "let the waiter of another client named by the last release go first"})
			}
			lw.w.Begin()
		}
		return h, err
	}
	if err := lw.w.Next(lw.wt, hint); err != nil {
		return handover{}, lw.c.waitErr(err, last)
	}
	return handover{}, nil
}

// queued waits for the caller's turn in the local queue.
func (lw *lockWait) queued(ctx context.Context) (handover, error) {
	c := lw.c
	t, prev, err := c.queue.Wait(ctx, queueKey(lw.keys), lw.w.GiveUp)
	lw.w.Begin()
	if err == nil {
		lw.turn = t
		return prev, nil
	}
	if prev.Token != "" {
		// A lock was handed over to this caller as it gave up, and no
		// other caller of this Client waits for it: release it.
		c.releaseUnclaimed(lw.keys, prev)
	}
	if errors.Is(err, queue.ErrClosed) {
		return prev, ErrClosed
	}
	e := &Error{Op: "lock", Key: strings.Join(lw.keys, ", "), Quorum: c.cfg.quorum, sentinel: ErrNotObtained,
		Reason: "waited behind other callers of this Client for the key"}
	if errors.Is(err, queue.ErrGaveUp) {
		e.Reason = joinReason(e.Reason, fmt.Sprintf("gave up after Options.MaxWait %v", c.cfg.maxWait))
	} else {
		e.ctx = err
	}
	return prev, e
}

// held hands the turn to l, which keeps it until Unlock or its expiry.
func (lw *lockWait) held(l *Lock) {
	lw.obtained = l
	l.turn = lw.turn
	lw.c.queue.Held(lw.turn, l.Until())
}

// queueKey is the key of keys' turns in the Client's local queue.
func queueKey(keys []string) string { return strings.Join(keys, "\x00") }

// leave gives the turn up unless a lock holds it, and ends the strategy's
// wait.
func (lw *lockWait) leave() {
	if lw.obtained == nil {
		lw.c.queue.Leave(lw.turn)
		lw.wt.Done("")
		return
	}
	lw.wt.Done(lw.obtained.token)
}
