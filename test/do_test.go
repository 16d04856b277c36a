package test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
	"github.com/redquorum/redquorum/redlock"
)

// TestDoRetriesExtension: when a quorum of nodes stops answering for a
// while (CLIENT PAUSE) as Do extends its lock, Do retries the extension
// while the lock is still valid, and fn runs to its end without losing it.
func TestDoRetriesExtension(t *testing.T) {
	leakcheck.Check(t)
	addrs, _ := five(t)
	c := open(t, addrs, &redlock.Options{NodeTimeout: 100 * time.Millisecond})
	started := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		// The lock is valid for 3 s; its first extension, after 1 s,
		// meets the pause from 0.5 s to 1.6 s.
		errc <- c.Do(t.Context(), "job", 3*time.Second, func(ctx context.Context) error {
			close(started)
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(2500 * time.Millisecond):
				return nil
			}
		})
	}()
	<-started
	time.Sleep(500 * time.Millisecond)
	for _, a := range addrs[:3] {
		_, err := redisproc.Do(t.Context(), a, "CLIENT", "PAUSE", "1100", "ALL")
		require.NoError(t, err)
	}
	require.NoError(t, <-errc, "the lock was lost although the extension could be retried")
}

// TestDoTry: with DoOptions.Try, Do on a busy key returns at once (not
// after Options.MaxWait) an error wrapping ErrNotObtained, and fn does
// not run; of three machines that try the same job at once, at most one
// runs it.
func TestDoTry(t *testing.T) {
	leakcheck.Check(t)
	addrs, direct := five(t)
	c := open(t, addrs, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // below MaxWait: a wait would end here
	defer cancel()
	held, err := c.Lock(ctx, "batch", time.Minute)
	require.NoError(t, err)
	ran := false
	err = c.Do(ctx, "batch", time.Minute, func(context.Context) error { ran = true; return nil }, redlock.DoOptions{Try: true})
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.ErrorIs(t, err, redlock.ErrTaken)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "Do waited")
	assert.False(t, ran)
	require.NoError(t, held.Unlock(ctx))

	var runs atomic.Int32
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 3 {
		m := open(t, addrs, &redlock.Options{Owner: "machine-" + strconv.Itoa(i)})
		wg.Go(func() {
			errs[i] = m.Do(ctx, "nightly", time.Minute, func(context.Context) error {
				runs.Add(1)
				time.Sleep(200 * time.Millisecond)
				return nil
			}, redlock.DoOptions{Try: true})
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, runs.Load(), int32(1))
	for i, err := range errs {
		if err != nil {
			assert.ErrorIs(t, err, redlock.ErrNotObtained, "machine %d", i)
		}
	}
	require.Eventually(t, func() bool { return direct[0].Exists(ctx, "nightly").Val() == 0 }, 5*time.Second, time.Millisecond)
}

// TestDoMaxWait: DoOptions.MaxWait bounds the wait for a busy key, and
// says so; on a free key, fn runs beyond MaxWait with its context intact.
func TestDoMaxWait(t *testing.T) {
	leakcheck.Check(t)
	addrs, _ := five(t)
	c := open(t, addrs, nil)
	ctx := t.Context()
	held, err := c.Lock(ctx, "report", time.Minute)
	require.NoError(t, err)
	ran := false
	err = c.Do(ctx, "report", time.Minute, func(context.Context) error { ran = true; return nil }, redlock.DoOptions{MaxWait: 300 * time.Millisecond})
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	assert.False(t, ran)
	var e *redlock.Error
	require.ErrorAs(t, err, &e)
	assert.Contains(t, e.Reason, "gave up after DoOptions.MaxWait 300ms")
	require.NoError(t, held.Unlock(ctx))

	err = c.Do(ctx, "report", time.Minute, func(ctx context.Context) error {
		time.Sleep(600 * time.Millisecond) // twice MaxWait
		return ctx.Err()
	}, redlock.DoOptions{MaxWait: 300 * time.Millisecond})
	require.NoError(t, err, "MaxWait cut the work")
}

// TestDoLockFrom: fn reaches the lock Do holds through LockFrom: its key,
// fence and validity. Outside Do, LockFrom returns nil.
func TestDoLockFrom(t *testing.T) {
	leakcheck.Check(t)
	addrs, _ := five(t)
	c := open(t, addrs, &redlock.Options{Fencing: true})
	var fence uint64
	err := c.Do(t.Context(), "payment:7", 10*time.Second, func(ctx context.Context) error {
		l := redlock.LockFrom(ctx)
		if l == nil {
			return errors.New("no lock in fn's context")
		}
		if l.Key() != "payment:7" || !l.Until().After(time.Now()) {
			return errors.New("not the lock held")
		}
		fence = l.Fence()
		return nil
	})
	require.NoError(t, err)
	assert.Positive(t, fence)
	assert.Nil(t, redlock.LockFrom(t.Context()))
}

// TestDoOptionsChecked: bad options give an error naming them, and
// nothing is sent.
func TestDoOptionsChecked(t *testing.T) {
	addrs, direct := five(t)
	c := open(t, addrs, nil)
	ctx := t.Context()
	fn := func(context.Context) error { t.Error("fn ran"); return nil }
	assert.EqualError(t, c.Do(ctx, "k", time.Second, fn, redlock.DoOptions{MaxWait: -time.Second}),
		"redlock: DoOptions.MaxWait -1s is negative")
	assert.EqualError(t, c.Do(ctx, "k", time.Second, fn, redlock.DoOptions{Try: true, MaxWait: time.Second}),
		"redlock: DoOptions.MaxWait 1s with Try, which does not wait")
	assert.EqualError(t, c.Do(ctx, "k", time.Second, fn, redlock.DoOptions{}, redlock.DoOptions{}),
		"redlock: Do takes at most one DoOptions, got 2")
	noKey(t, direct, "k")
}
