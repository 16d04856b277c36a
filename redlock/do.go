package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/retry"
)

// ErrLockLost means that a lock held by [Client.Do] could no longer be shown
// held while fn ran. An extension found its token gone from too many nodes,
// the Client was closed, or the validity ran out before an extension
// succeeded.
var ErrLockLost = errors.New("redlock: lock lost")

// DoOptions are the options of one call of [Client.Do]. The zero value is
// Do's default: wait for the lock as [Client.Lock] does.
type DoOptions struct {
	// Try makes one attempt to lock, as [Client.TryLock] does. When the key
	// is busy, Do returns at once an error wrapping ErrNotObtained, and fn
	// does not run. Use Try for a job on several machines that must run once
	// per schedule: without it, each machine waits and runs the job in turn.
	Try bool
	// MaxWait, when positive, bounds the wait for the lock, and only the
	// wait: fn then runs under ctx, without this bound. Zero leaves the
	// wait to Lock's rules: ctx's deadline, or Options.MaxWait when ctx has
	// none. A deadline on ctx bounds both the wait and fn. MaxWait goes
	// with Try only as zero.
	MaxWait time.Duration
}

// checkDoOptions validates opts, the options given to Do, and returns the one in
// effect.
func checkDoOptions(opts []DoOptions) (DoOptions, error) {
	switch {
	case len(opts) == 0:
		return DoOptions{}, nil
	case len(opts) > 1:
		return DoOptions{}, fmt.Errorf("redlock: Do takes at most one DoOptions, got %d", len(opts))
	}
	o := opts[0]
	switch {
	case o.MaxWait < 0:
		return o, fmt.Errorf("redlock: DoOptions.MaxWait %v is negative", o.MaxWait)
	case o.Try && o.MaxWait > 0:
		return o, fmt.Errorf("redlock: DoOptions.MaxWait %v with Try, which does not wait", o.MaxWait)
	}
	return o, nil
}

// lockKey is the context key under which Do passes the lock to fn.
type lockKey struct{}

// LockFrom returns the lock that [Client.Do] holds while it runs fn, from
// fn's context or one derived from it. Read its fence ([Lock.Fence]) or
// validity ([Lock.Until]) there; Do extends and releases it itself.
// Outside Do, LockFrom returns nil, whose methods return [ErrNotHeld] or
// zero values (see [Lock]).
func LockFrom(ctx context.Context) *Lock {
	l, _ := ctx.Value(lockKey{}).(*Lock)
	return l
}

// Do locks key as [Client.Lock] does, runs fn, and then unlocks, also when
// fn panics. fn finds the lock with [LockFrom]. opts, at most one, may make
// Do try once or bound only its wait (see [DoOptions]).
//
// While fn runs, Do extends the lock to ttl about every ttl/3. Once the lock
// can no longer be shown held, fn's context is cancelled with cause
// [ErrLockLost], and fn must stop touching the resource.
//
// Do returns Lock's error if fn did not run, else fn's error joined with
// ErrLockLost if the lock was lost. No goroutine outlives Do.
func (c *Client) Do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context) error, opts ...DoOptions) error {
	o, err := checkDoOptions(opts)
	if err != nil {
		return err
	}
	if c.obs == nil {
		return c.do(ctx, key, ttl, fn, o, nil)
	}
	ctx, rec := c.begin(ctx, OpDo, []string{key})
	err = c.do(ctx, key, ttl, fn, o, rec)
	rec.end(err, Released)
	return err
}

// obtain is Do's lock call, as o says.
func (c *Client) obtain(ctx context.Context, key string, ttl time.Duration, o DoOptions) (*Lock, error) {
	if o.Try {
		return c.TryLock(ctx, key, ttl)
	}
	if o.MaxWait == 0 {
		return c.Lock(ctx, key, ttl)
	}
	wctx, cancel := context.WithTimeout(ctx, o.MaxWait)
	defer cancel()
	l, err := c.Lock(wctx, key, ttl)
	if e := (*Error)(nil); err != nil && ctx.Err() == nil && errors.As(err, &e) {
		e.Reason = joinReason(e.Reason, fmt.Sprintf("gave up after DoOptions.MaxWait %v", o.MaxWait))
	}
	return l, err
}

// do is Do, recorded in rec when not nil.
func (c *Client) do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context) error, o DoOptions, rec *record) (err error) {
	if fn == nil {
		return errors.New("redlock: Do with a nil fn")
	}
	l, err := c.obtain(ctx, key, ttl, o)
	if err != nil {
		return err
	}
	return c.hold(ctx, l, ttl, fn, rec)
}

// hold runs fn while it holds l, obtained for ttl, extending it and
// cancelling fn's context when it is lost, and unlocks it when fn returns
// (see Do).
func (c *Client) hold(ctx context.Context, l *Lock, ttl time.Duration, fn func(ctx context.Context) error, rec *record) (err error) {
	if rec != nil {
		rec.lock, rec.ended = l, true
	}
	fctx, cancel := context.WithCancelCause(context.WithValue(ctx, lockKey{}, l))
	stop := make(chan struct{})
	lost := make(chan error, 1) // the watchdog's verdict, at most one
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		extended := func(n int) { c.doEvent(ctx, l, n, nil) }
		if why := c.watch(ctx, l, ttl, stop, extended); why != nil {
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

// watch extends l to ttl every ttl/3 until stop is closed. It retries a
// failed extension while the lock is valid by more than its drift
// allowance. After each extension that succeeds, it calls extended with
// the count so far. It returns nil when stopped, or why the lock can no
// longer be shown held.
func (c *Client) watch(ctx context.Context, l *Lock, ttl time.Duration, stop <-chan struct{}, extended func(n int)) error {
	ctx = context.WithoutCancel(ctx) // the caller's cancellation stops fn, not the extensions
	clk := c.cfg.clock
	margin := clock.Drift(ttl, c.cfg.drift)
	var failed error // the last extension's error, while retrying it
	for n, retries := 1, 0; ; {
		left := l.Until().Sub(clk.Now())
		wait := min(ttl/3, left)
		if failed != nil {
			wait = min(retry.Delay(retries, c.cfg.minRetry, c.cfg.maxRetry), left-margin)
			retries++
		}
		select {
		case <-stop:
			return nil
		case <-clk.After(wait):
		case <-c.life.closing:
			return ErrClosed // Close releases the lock
		}
		left = l.Until().Sub(clk.Now())
		switch {
		case failed != nil && left <= margin:
			return fmt.Errorf("validity ran out while an extension was retried: %w", failed)
		case left <= 0:
			return errors.New("validity ran out before an extension succeeded")
		}
		res := make(chan error, 1)
		go func() { res <- l.Extend(ctx, ttl) }()
		select {
		case err := <-res:
			if err != nil && c.extensionFinal(err) {
				return err
			}
			if failed = err; err == nil {
				retries = 0
				extended(n)
				n++
			}
		case <-clk.After(left):
			<-res // Extend is bounded by the node timeout
			return errors.New("validity ran out during an extension")
		}
	}
}

// extensionFinal reports whether err, the failure of an extension, shows
// the lock lost for good, so that a retry is pointless. That is so when the
// token is gone from so many nodes that a quorum cannot hold it. It is so
// too when the lock was unlocked, its validity ran out, or the Client was
// closed.
func (c *Client) extensionFinal(err error) bool {
	var e *Error
	if !errors.As(err, &e) || len(e.Nodes) == 0 {
		return true // no node was asked: decided locally
	}
	return c.tokenGone(e)
}
