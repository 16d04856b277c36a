package redlock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/redquorum/redquorum/internal/queue"
	"github.com/redquorum/redquorum/internal/retry"
	"github.com/redquorum/redquorum/internal/wake"
)

// waiter is how [Client.Lock] waits between its rounds. It first waits for
// its turn in the Client's local queue for the keys. After each failed
// round it waits a jittered backoff, which the Client's waiting strategy
// (s) may cut short. Each wait ends when ctx does. When ctx has no
// deadline, a Lock call also gives up at Options.MaxWait (see waitFor).
type waiter struct {
	c        *Client
	ctx      context.Context
	keys     []string
	s        waiting
	turn     *queue.Turn[handover] // nil until the first next
	attempts int                   // rounds failed so far
	obtained *Lock
	start    time.Time // of the last round
	giveUp   <-chan time.Time
	// giveUpAt is when to give up unless ctxOnly: the timer is made only
	// when Lock has to wait (an allocation saved per call).
	giveUpAt time.Time
	// ctxOnly is set when only ctx bounds the wait: ctx has a deadline,
	// or the call waits for it alone (waitCtx).
	ctxOnly bool
	began   time.Time // when Lock was called
}

// waitFor is how long a lock call waits for the lock.
type waitFor uint8

const (
	waitNot waitFor = iota // one round (TryLock)
	waitMax                // until ctx ends or, when ctx has no deadline, Options.MaxWait has passed (Lock)
	waitCtx                // until ctx ends (an election's Campaign)
)

// newWaiter returns the waiter of a Lock call for keys that began at
// began and waits as wait says.
func (c *Client) newWaiter(ctx context.Context, keys []string, began time.Time, wait waitFor) *waiter {
	_, hasDeadline := ctx.Deadline()
	s := c.wait.wait()
	w := s.base()
	*w = waiter{c: c, ctx: ctx, keys: keys, s: s, ctxOnly: hasDeadline || wait == waitCtx, began: began, giveUpAt: began.Add(c.cfg.maxWait)}
	return w
}

// giveUpChan returns a channel that fires once Options.MaxWait has passed
// since the waiter began, or nil when only ctx bounds the wait.
func (w *waiter) giveUpChan() <-chan time.Time {
	if w.giveUp == nil && !w.ctxOnly {
		clk := w.c.cfg.clock
		w.giveUp = clk.After(w.giveUpAt.Sub(clk.Now()))
	}
	return w.giveUp
}

// next waits for the next chance to try. The first call waits for the
// caller's turn in the local queue, and returns the lock handed over with
// the turn, if any. Each later call follows a failed round: last is its
// error, and hint when it found the holder's keys free (0: unknown). It
// waits retryIn's delay, as the strategy adjusts it, or until the strategy
// wakes it. It returns an error for Lock to return when the caller must
// give up: ctx ended, MaxWait passed, or the Client was closed (at once,
// not at the next round).
func (w *waiter) next(last *Error, hint time.Duration) (handover, error) {
	if w.turn == nil {
		h, err := w.queued()
		if err == nil && h.Token == "" {
			err = w.s.first()
			w.start = w.c.cfg.clock.Now()
		}
		return h, err
	}
	if err := ctxEnded(w.ctx); err != nil {
		// The context ended during the round, perhaps after its decision.
		last.ctx = err
		return handover{}, last
	}
	cfg := w.c.cfg
	if err := w.s.sleep(cfg.clock.After(w.retryIn(hint, w.s.delay)), last); err != nil {
		return handover{}, err
	}
	w.start = cfg.clock.Now()
	return handover{}, nil
}

// retryIn returns the wait before the next round after a refused one. It
// is a random delay between Options.MinRetryDelay and a cap that doubles
// with each refusal up to Options.MaxRetryDelay, as adjust changes it. When
// hint, the time until the holder's keys expire, is sooner, it is hint,
// spread a little so that waiters do not arrive in step.
func (w *waiter) retryIn(hint time.Duration, adjust func(time.Duration) time.Duration) time.Duration {
	cfg := w.c.cfg
	wait := adjust(retry.Delay(w.attempts, cfg.minRetry, cfg.maxRetry))
	w.attempts++
	if hint > 0 && hint < wait {
		wait = hint + retry.Jitter(min(cfg.minRetry, hint/4))
	}
	return wait
}

// listen waits for timer, or for an announcement of the release of the
// first key heard after since: it then returns whom the announcement named
// ("" for nobody) and woken. It returns the error for Lock to return when
// ctx ends, MaxWait passes or the Client closes.
func (w *waiter) listen(wk *wake.Waker, timer <-chan time.Time, since time.Time, last *Error) (next string, woken bool, err error) {
	return w.listenOn(wk, w.keys[:1], timer, since, last)
}

// listenOn is listen for an announcement of the release of any of keys
// (as given; none with a nil wk), the one waiting loop of locks and
// semaphores.
func (w *waiter) listenOn(wk *wake.Waker, keys []string, timer <-chan time.Time, since time.Time, last *Error) (next string, woken bool, err error) {
	var wt *wake.Wait // nil never fires
	if wk != nil && len(keys) > 0 {
		wt = wk.Listen(w.c.stored(keys[0]), since) // fires when a node announces the key's release
		defer wt.Close()
	}
	if wk != nil && len(keys) > 1 {
		return w.listenMany(wk, wt, keys[1:], timer, since, last)
	}
	select {
	case <-timer:
		return "", false, nil
	case <-wt.C():
		return wt.Next(), true, nil
	case <-w.ctx.Done():
		return "", false, w.ended(last)
	case <-w.giveUpChan():
		return "", false, w.ended(last)
	case <-w.c.life.closing:
		return "", false, ErrClosed
	}
}

// listenMany is listenOn for wt, the first key's wait, and the waits of
// more keys: a select over a number of channels known only when it runs.
func (w *waiter) listenMany(wk *wake.Waker, wt *wake.Wait, more []string, timer <-chan time.Time, since time.Time, last *Error) (string, bool, error) {
	waits := []*wake.Wait{wt}
	cases := []reflect.SelectCase{
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.ctx.Done())},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.giveUpChan())},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.c.life.closing)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(wt.C())},
	}
	for _, k := range more {
		kw := wk.Listen(w.c.stored(k), since)
		defer kw.Close()
		waits = append(waits, kw)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(kw.C())})
	}
	switch chosen, _, _ := reflect.Select(cases); chosen {
	case 0:
		return "", false, nil
	case 1, 2:
		return "", false, w.ended(last)
	case 3:
		return "", false, ErrClosed
	default:
		return waits[chosen-4].Next(), true, nil
	}
}

// ended returns last, the error for the caller to return once ctx ended
// (then its error is last's) or MaxWait passed (then its reason says so).
func (w *waiter) ended(last *Error) error {
	if err := w.ctx.Err(); err != nil {
		last.ctx = err
		return last
	}
	last.Reason = joinReason(last.Reason, fmt.Sprintf("gave up after Options.MaxWait %v", w.c.cfg.maxWait))
	return last
}

// queued waits for the caller's turn in the local queue.
func (w *waiter) queued() (handover, error) {
	t, prev, err := w.c.queue.Wait(w.ctx, queueKey(w.keys), w.giveUpChan)
	w.start = w.c.cfg.clock.Now()
	if err == nil {
		w.turn = t
		return prev, nil
	}
	if prev.Token != "" {
		// A lock was handed over to this caller as it gave up, and no
		// other caller of this Client waits for it: release it.
		w.c.releaseUnclaimed(w.keys, prev)
	}
	if errors.Is(err, queue.ErrClosed) {
		return prev, ErrClosed
	}
	e := &Error{Op: "lock", Key: strings.Join(w.keys, ", "), Quorum: w.c.cfg.quorum, sentinel: ErrNotObtained,
		Reason: "waited behind other callers of this Client for the key"}
	if errors.Is(err, queue.ErrGaveUp) {
		e.Reason = joinReason(e.Reason, fmt.Sprintf("gave up after Options.MaxWait %v", w.c.cfg.maxWait))
	} else {
		e.ctx = err
	}
	return prev, e
}

// jitter waits, after a wake, a random moment of up to one round's
// duration and at most MinRetryDelay. Clients in separate processes woken
// by one message then do not all send their rounds at once and split the
// nodes' votes. Spread over a round, the first to arrive usually finds the
// nodes free, and the others find them taken.
func (w *waiter) jitter() {
	round := w.c.cfg.clock.Now().Sub(w.start)
	if d := retry.Jitter(min(round, w.c.cfg.minRetry)); d > 0 {
		<-w.c.cfg.clock.After(d)
	}
}

// held hands the turn to l, which keeps it until Unlock or its expiry.
func (w *waiter) held(l *Lock) {
	w.obtained = l
	l.turn = w.turn
	w.c.queue.Held(w.turn, l.Until())
}

// queueKey is the key of keys' turns in the Client's local queue.
func queueKey(keys []string) string { return strings.Join(keys, "\x00") }

// leave gives the turn up unless a lock holds it, and ends the strategy's
// wait.
func (w *waiter) leave() {
	if w.obtained == nil {
		w.c.queue.Leave(w.turn)
	}
	w.s.done(w.obtained)
}

// joinReason joins two reasons, either of which may be empty, with "; ".
func joinReason(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
