package waiting

import (
	"context"
	"reflect"
	"time"

	"github.com/redquorum/redquorum/internal/retry"
	"github.com/redquorum/redquorum/internal/wake"
)

// Waiter is how a lock call waits between its rounds: after each failed
// round, a jittered backoff, which the Client's waiting strategy may cut
// short. Each wait ends when ctx does. When ctx has no deadline, a call
// also gives up at Config.MaxWait (see ctxOnly).
type Waiter struct {
	b        *backoff // the Client's strategy, at its base
	ctx      context.Context
	keys     []string
	attempts int       // rounds failed so far
	start    time.Time // of the last round
	giveUp   <-chan time.Time
	// giveUpAt is when to give up unless ctxOnly: the timer is made only
	// when the call has to wait (an allocation saved per call).
	giveUpAt time.Time
	// ctxOnly is set when only ctx bounds the wait: ctx has a deadline,
	// or the call waits for it alone (an election's campaign).
	ctxOnly bool
	began   time.Time // when the call began
}

// init makes w the waiter of a call with ctx for keys that began at began.
func (w *Waiter) init(b *backoff, ctx context.Context, keys []string, began time.Time, ctxOnly bool) {
	*w = Waiter{b: b, ctx: ctx, keys: keys, start: began, began: began, ctxOnly: ctxOnly, giveUpAt: began.Add(b.cfg.MaxWait)}
}

// GiveUp returns a channel that fires once Config.MaxWait has passed
// since the waiter began, or nil when only ctx bounds the wait.
func (w *Waiter) GiveUp() <-chan time.Time {
	if w.giveUp == nil && !w.ctxOnly {
		clk := w.b.cfg.Clock
		w.giveUp = clk.After(w.giveUpAt.Sub(clk.Now()))
	}
	return w.giveUp
}

// Begin notes that a round begins now.
func (w *Waiter) Begin() { w.start = w.b.cfg.Clock.Now() }

// Start returns when the last round began.
func (w *Waiter) Start() time.Time { return w.start }

// Next waits for the next chance to try after a failed round of wt's,
// which found the holder's keys free in hint (0: unknown). It waits
// RetryIn's delay, as wt adjusts it, or until wt wakes it. It returns
// ErrClosed, ErrMaxWait or ctx's error when the caller must give up: at
// once, not at the next round, on a closed Client.
func (w *Waiter) Next(wt Wait, hint time.Duration) error {
	if err := ctxEnded(w.ctx); err != nil {
		return err // the context ended during the round, perhaps after its decision
	}
	if err := wt.Sleep(w.b.cfg.Clock.After(w.RetryIn(hint, wt.Delay))); err != nil {
		return err
	}
	w.Begin()
	return nil
}

// RetryIn returns the wait before the next round after a refused one. It
// is a random delay between Config.MinRetry and a cap that doubles with
// each refusal up to Config.MaxRetry, as adjust (nil: none) changes it.
// When hint, the time until the holder's keys expire, is sooner, it is
// hint, spread a little so that waiters do not arrive in step.
func (w *Waiter) RetryIn(hint time.Duration, adjust func(time.Duration) time.Duration) time.Duration {
	cfg := w.b.cfg
	wait := retry.Delay(w.attempts, cfg.MinRetry, cfg.MaxRetry)
	if adjust != nil {
		wait = adjust(wait)
	}
	w.attempts++
	if hint > 0 && hint < wait {
		wait = hint + retry.Jitter(min(cfg.MinRetry, hint/4))
	}
	return wait
}

// listen waits for timer, or for an announcement of the release of the
// first key heard after since: it then returns whom the announcement named
// ("" for nobody) and woken.
func (w *Waiter) listen(wk *wake.Waker, timer <-chan time.Time, since time.Time) (next string, woken bool, err error) {
	return w.ListenOn(wk, w.keys[:1], timer, since)
}

// ListenOn is listen for an announcement of the release of any of keys
// (as given; none with a nil wk), the one waiting loop of locks and
// semaphores. It returns ErrClosed, ErrMaxWait or the context's error
// when the caller must give up.
func (w *Waiter) ListenOn(wk *wake.Waker, keys []string, timer <-chan time.Time, since time.Time) (next string, woken bool, err error) {
	var wt *wake.Wait // nil never fires
	if wk != nil && len(keys) > 0 {
		wt = wk.Listen(w.b.stored(keys[0]), since) // fires when a node announces the key's release
		defer wt.Close()
	}
	if wk != nil && len(keys) > 1 {
		return w.listenMany(wk, wt, keys[1:], timer, since)
	}
	select {
	case <-timer:
		return "", false, nil
	case <-wt.C():
		return wt.Next(), true, nil
	case <-w.ctx.Done():
		return "", false, w.ended()
	case <-w.GiveUp():
		return "", false, w.ended()
	case <-w.b.host.Closing():
		return "", false, ErrClosed
	}
}

// listenMany is ListenOn for wt, the first key's wait, and the waits of
// more keys: a select over a number of channels known only when it runs.
func (w *Waiter) listenMany(wk *wake.Waker, wt *wake.Wait, more []string, timer <-chan time.Time, since time.Time) (string, bool, error) {
	waits := []*wake.Wait{wt}
	cases := []reflect.SelectCase{
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer)},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.ctx.Done())},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.GiveUp())},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.b.host.Closing())},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(wt.C())},
	}
	for _, k := range more {
		kw := wk.Listen(w.b.stored(k), since)
		defer kw.Close()
		waits = append(waits, kw)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(kw.C())})
	}
	switch chosen, _, _ := reflect.Select(cases); chosen {
	case 0:
		return "", false, nil
	case 1, 2:
		return "", false, w.ended()
	case 3:
		return "", false, ErrClosed
	default:
		return waits[chosen-4].Next(), true, nil
	}
}

// ended returns why a wait ended once ctx ended (its error) or MaxWait
// passed (ErrMaxWait).
func (w *Waiter) ended() error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	return ErrMaxWait
}

// Jitter waits, after a wake, a random moment of up to one round's
// duration and at most MinRetry. Clients in separate processes woken by
// one message then do not all send their rounds at once and split the
// nodes' votes. Spread over a round, the first to arrive usually finds
// the nodes free, and the others find them taken.
func (w *Waiter) Jitter() {
	clk := w.b.cfg.Clock
	round := clk.Now().Sub(w.start)
	if d := retry.Jitter(min(round, w.b.cfg.MinRetry)); d > 0 {
		<-clk.After(d)
	}
}

// ctxEnded returns ctx's error. Once ctx's deadline has passed, it returns
// context.DeadlineExceeded even if ctx's timer has not fired yet. A node
// call bounded by that deadline can time out at the socket first. Its
// timeout is then the context's, not the node's.
func ctxEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}
