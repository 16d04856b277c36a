package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrLockLost means that a lock held by [Client.Do] could no longer be shown
// to be held while fn ran: an extension failed, or the lock's validity ran out
// before an extension succeeded.
var ErrLockLost = errors.New("redlock: lock lost")

// Do acquires key with [Client.Lock]'s retry rules, runs fn, and releases the
// lock afterwards, also when fn panics.
//
// While fn runs, the lock is extended to ttl about every ttl/3. The context
// given to fn is cancelled, with cause [ErrLockLost] (see context.Cause), as
// soon as the lock can no longer be shown to be held: an extension fails, or
// the lock's validity runs out before an extension succeeds. fn must stop
// touching the protected resource when its context is done.
//
// Do returns Lock's error if the lock was not obtained (fn did not run).
// Otherwise it returns fn's error, joined with ErrLockLost and the cause when
// the lock was lost, including when the final Unlock finds that fewer than a
// quorum of nodes still held it. No goroutine outlives Do.
func (c *Client) Do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context) error) error {
	if c.obs == nil {
		return c.do(ctx, key, ttl, fn, nil)
	}
	ctx, rec := c.begin(ctx, OpDo, []string{key})
	err := c.do(ctx, key, ttl, fn, rec)
	rec.end(err, Released)
	return err
}

// do is Do, recorded in rec when not nil.
func (c *Client) do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context) error, rec *record) (err error) {
	if fn == nil {
		return errors.New("redlock: Do with a nil fn")
	}
	l, err := c.Lock(ctx, key, ttl)
	if err != nil {
		return err
	}
	if rec != nil {
		rec.lock, rec.ended = l, true
	}
	fctx, cancel := context.WithCancelCause(ctx)
	stop := make(chan struct{})
	lost := make(chan error, 1) // the watchdog's verdict, at most one
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		if why := c.watch(ctx, l, ttl, stop); why != nil {
			c.doEvent(ctx, l, 0, why)
			lost <- why
			cancel(ErrLockLost)
		}
	}()
	defer func() {
		close(stop)
		<-watched
		cancel(nil)
		var why error
		select {
		case why = <-lost:
		default:
		}
		uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), 2*c.cfg.nodeTimeout)
		defer ucancel()
		uerr := l.Unlock(uctx)
		if why == nil && errors.Is(uerr, ErrNotHeld) {
			why = fmt.Errorf("found at unlock: %w", uerr)
			uerr = nil
			c.doEvent(ctx, l, 0, why)
		}
		if why != nil {
			err = joinErrs(err, &lostError{why}, ErrLockLost)
		}
		if uerr != nil && !errors.Is(uerr, ErrNotHeld) {
			err = joinErrs(err, uerr, nil)
		}
	}()
	return fn(fctx)
}

// lostError is Do's error for a lock lost while fn ran: one line that says
// why, wrapping ErrLockLost and the cause.
type lostError struct{ why error }

func (e *lostError) Error() string   { return ErrLockLost.Error() + ": " + e.why.Error() }
func (e *lostError) Unwrap() []error { return []error{ErrLockLost, e.why} }

// joinErrs returns err and more on one line; more alone when err is nil or
// is replaced itself (ErrLockLost, when fn returned its context's cause).
func joinErrs(err, more, replaced error) error {
	if err == nil || err == replaced {
		return more
	}
	return fmt.Errorf("%w; %w", err, more)
}

// watch extends l to ttl every ttl/3 until stop is closed. It returns nil when
// stopped, or why the lock can no longer be shown to be held.
func (c *Client) watch(ctx context.Context, l *Lock, ttl time.Duration, stop <-chan struct{}) error {
	ctx = context.WithoutCancel(ctx) // the caller's cancellation stops fn, not the extensions
	clk := c.cfg.clock
	for n := 1; ; n++ {
		left := l.Until().Sub(clk.Now())
		select {
		case <-stop:
			return nil
		case <-clk.After(min(ttl/3, left)):
		}
		left = l.Until().Sub(clk.Now())
		if left <= 0 {
			return errors.New("validity ran out before an extension succeeded")
		}
		res := make(chan error, 1)
		go func() { res <- l.Extend(ctx, ttl) }()
		select {
		case err := <-res:
			if err != nil {
				return err
			}
			c.doEvent(ctx, l, n, nil)
		case <-clk.After(left):
			<-res // Extend is bounded by the node timeout
			return errors.New("validity ran out during an extension")
		}
	}
}
