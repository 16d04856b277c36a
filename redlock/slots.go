package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/waiting"
)

// slotRounds is one call's way through the slots of a semaphore: a
// Semaphore's Acquire, or an RWMutex's RLock (reader) or Lock (writer).
type slotRounds struct {
	sem   *Semaphore
	layer protocol.Layer
	wait  bool // Acquire: wait between passes; TryAcquire: one pass
	// reader ends a pass at the first round that a writer refused: the
	// other slots would refuse it too.
	reader bool
	// writer is the key of an RWMutex's writer: its rounds lock that key
	// alone, which the nodes refuse while a reader holds a slot. "" for
	// the others, which lock one slot.
	writer string
}

// slots obtains a slot as sr says and returns its lock and its number,
// reported to the Observer as op if there is one.
func (c *Client) slots(ctx context.Context, op Op, sr slotRounds, ttl time.Duration) (*Lock, int, error) {
	if c.obs == nil {
		return c.slotRounds(ctx, sr, ttl, nil)
	}
	ctx, rec := c.begin(ctx, op, []string{sr.sem.name})
	l, slot, err := c.slotRounds(ctx, sr, ttl, rec)
	rec.end(err, Obtained)
	return l, slot, err
}

// slotRounds is slots, recorded in rec when not nil: passes over the
// slots (slotPass), with a wait between them (slotWait.sleep) unless
// sr.wait is false.
func (c *Client) slotRounds(ctx context.Context, sr slotRounds, ttl time.Duration, rec *record) (*Lock, int, error) {
	ttl, err := c.checkTTL(ttl)
	if err != nil {
		return nil, 0, err
	}
	if err := c.ready(ctx, []string{sr.sem.name}); err != nil {
		return nil, 0, err
	}
	w := c.newSlotWait(ctx)
	var last *Error
	for {
		l, slot, err := c.slotPass(ctx, sr, ttl, rec, w)
		if err != nil || l != nil {
			return l, slot, err
		}
		last = w.last
		if !sr.wait {
			return nil, 0, last
		}
		if err := w.sleep(last); err != nil {
			return nil, 0, err
		}
	}
}

// slotPass tries the slots in turn from one at random, a round each. It
// returns the lock of the first that grants, or an error that ends the
// call. When every slot refused, it returns nil and leaves in w what to
// wait for: the keys whose release ends the wait, the soonest time a
// holder's keys expire, and the last round's error. A writer's pass is one
// round on its writer key. A reader's ends at the first round that a writer
// refused, since every slot would.
func (c *Client) slotPass(ctx context.Context, sr slotRounds, ttl time.Duration, rec *record, w *slotWait) (*Lock, int, error) {
	s := sr.sem
	start, tries := rand.IntN(s.limit), s.limit
	if sr.writer != "" {
		tries = 1
	}
	w.listen, w.hint = w.listen[:0], 0
	for i := range tries {
		slot := (start + i) % s.limit
		keys := []string{s.slotKey(slot)}
		if sr.writer != "" {
			keys = []string{sr.writer}
		}
		l, freeIn, _, err := c.attempt(ctx, keys, ttl, handover{}, nil, waiting.Join{}, sr.layer, rec)
		if err == nil {
			return l, slot, nil
		}
		if err := c.sameServer(keys); err != nil {
			return nil, 0, err
		}
		var e *Error
		if !errors.As(err, &e) {
			return nil, 0, err // closed
		}
		if e.earlier = w.last; w.last != nil {
			w.last.earlier = nil // one round back is enough
		}
		w.last = e
		if err := s.mismatch(e); err != nil {
			return nil, 0, err
		}
		if e.final() || e.ctx != nil {
			return nil, 0, e
		}
		if freeIn > 0 && (w.hint == 0 || freeIn < w.hint) {
			w.hint = freeIn
		}
		if sr.reader && errors.Is(e, errWriterWaits) {
			w.listen = append(w.listen[:0], s.key("writer")) // its release wakes the reader
			break
		}
		w.listen = append(w.listen, keys...)
		if sr.writer != "" { // a reader's release, or the writer's, wakes the writer
			for i := range s.limit {
				w.listen = append(w.listen, s.slotKey(i))
			}
		}
	}
	return nil, 0, nil
}

// mismatch returns the error of a round that nodes refused because they
// hold the semaphore's name with another limit, when they are so many
// that the others are fewer than a quorum; else nil.
func (s *Semaphore) mismatch(e *Error) error {
	n, theirs := 0, ""
	for _, r := range e.Nodes {
		var le *limitError
		if errors.As(r.Err, &le) {
			n, theirs = n+1, le.limit
		}
	}
	if n == 0 || n <= len(e.Nodes)-e.Quorum {
		return nil
	}
	return fmt.Errorf("redlock: %s %q: this Client's limit is %d, but %d of %d nodes hold it with limit %s: %w (%w)",
		s.kind(), s.name, s.limit, n, len(e.Nodes), theirs, ErrLimitMismatch, e)
}

// slotWait is how a semaphore's caller waits between its passes over the
// slots: a waiter's backoff, give-up and jitter (internal/waiting), cut
// short by a release announced on a node (internal/wake) of any slot it
// found taken.
type slotWait struct {
	c *Client
	w waiting.Waiter // its ctx, attempts, give-up and the last pass's start
	// listen, hint and last are what the last pass found (see slotPass).
	listen []string
	hint   time.Duration
	last   *Error
}

func (c *Client) newSlotWait(ctx context.Context) *slotWait {
	_, hasDeadline := ctx.Deadline()
	return &slotWait{c: c, w: c.wait.Waiter(ctx, c.cfg.clock.Now(), hasDeadline)}
}

// sleep waits for the waiter's retry delay (see waiting.Waiter.RetryIn), or
// until a node announces the release of one of w.listen (then plus the
// waiter's jitter). It returns the error for the caller to return when ctx
// ends, MaxWait passes or the Client closes: last, the last round's, with
// the reason.
func (sw *slotWait) sleep(last *Error) error {
	w, c := &sw.w, sw.c
	timer := c.cfg.clock.After(w.RetryIn(sw.hint, nil))
	_, woken, err := w.ListenOn(c.waker(), sw.listen, timer, w.Start())
	if err != nil {
		return c.waitErr(err, last)
	}
	if woken { // spread the woken callers over a round's time
		w.Jitter()
	}
	w.Begin()
	return nil
}
