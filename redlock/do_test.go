package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// doHarness runs Client.Do in the background with a fake clock; fn reports its
// context and waits until the test lets it return.
type doHarness struct {
	c      *cluster
	cl     *Client
	fc     *clock.Fake
	fnCtx  chan context.Context
	finish chan error
	done   chan error
}

const doTTL = 3 * time.Second

func startDo(t *testing.T) *doHarness {
	t.Helper()
	h := &doHarness{
		c:      newCluster(t, 5),
		fc:     clock.NewFake(time.Unix(1000, 0)),
		fnCtx:  make(chan context.Context, 1),
		finish: make(chan error),
		done:   make(chan error, 1),
	}
	h.cl = h.c.client(t, &Options{Clock: h.fc})
	go func() {
		h.done <- h.cl.Do(t.Context(), "job", doTTL, func(ctx context.Context) error {
			h.fnCtx <- ctx
			return <-h.finish
		})
	}()
	return h
}

// tick waits until the watchdog sleeps for wait on the clock, then moves the
// clock by d.
func (h *doHarness) tick(t *testing.T, wait, d time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool { return h.fc.WaitingFor(wait) }, 5*time.Second, time.Millisecond, "the watchdog sleeps for %v", wait)
	h.fc.Advance(d)
}

func TestDoExtendsWhileFnRuns(t *testing.T) {
	leakcheck.Check(t)
	h := startDo(t)
	ctx := <-h.fnCtx
	token := h.c.waitAll(t, "job")
	// Five extension periods: far beyond the TTL; every one must succeed.
	for i := range 5 {
		calls := h.c.hooks[0].calls.Load()
		h.tick(t, doTTL/3, doTTL/3)
		require.Eventually(t, func() bool { return h.c.hooks[0].calls.Load() > calls }, 5*time.Second, time.Millisecond, "extension %d reached node 0", i)
		require.NoError(t, ctx.Err(), "fn's context was cancelled after extension %d", i)
	}
	h.finish <- nil
	require.NoError(t, <-h.done)
	require.NoError(t, h.cl.Close())
	assert.Equal(t, 0, h.c.keys("job"), "Do did not release")
	assert.NotEmpty(t, token)
}

func TestDoExtensionFails(t *testing.T) {
	leakcheck.Check(t)
	h := startDo(t)
	ctx := <-h.fnCtx
	h.c.waitAll(t, "job")
	for i := range 3 {
		require.NoError(t, h.c.srv[i].Set("job", "thief"))
	}
	h.tick(t, doTTL/3, doTTL/3)
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("fn's context was not cancelled after a failed extension")
	}
	assert.ErrorIs(t, context.Cause(ctx), ErrLockLost)
	h.finish <- ctx.Err()
	err := <-h.done
	assert.ErrorIs(t, err, ErrLockLost)
	assert.ErrorIs(t, err, context.Canceled, "fn's own error is kept")
	assert.ErrorIs(t, err, ErrNotHeld, "the failed extension is the cause")
	require.NoError(t, h.cl.Close())
	assert.Equal(t, 3, h.c.holders("job", "thief"), "another owner's keys were touched")
	assert.Equal(t, 3, h.c.keys("job"))
}

func TestDoValidityRunsOutDuringExtension(t *testing.T) {
	leakcheck.Check(t)
	h := startDo(t)
	ctx := <-h.fnCtx
	h.c.waitAll(t, "job")
	var releases []func()
	for _, hk := range h.c.hooks {
		releases = append(releases, hk.block())
	}
	h.tick(t, doTTL/3, doTTL/3) // the extension starts and stalls
	// validity runs out while it is stalled: the lock was valid for ttl − drift
	left := doTTL - clock.Drift(doTTL, DefaultDriftFactor) - doTTL/3
	h.tick(t, left, left)
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("fn's context was not cancelled when validity ran out")
	}
	assert.ErrorIs(t, context.Cause(ctx), ErrLockLost)
	for _, r := range releases {
		r()
	}
	h.finish <- nil
	err := <-h.done
	assert.ErrorIs(t, err, ErrLockLost)
	assert.Contains(t, err.Error(), "validity ran out")
}

func TestDoFnError(t *testing.T) {
	c := newCluster(t, 3)
	cl := c.client(t, nil)
	boom := errors.New("boom")
	err := cl.Do(t.Context(), "k", time.Second, func(ctx context.Context) error { return boom })
	assert.Equal(t, boom, err, "fn's error comes back as it is")
	assert.NoError(t, cl.Do(t.Context(), "k", time.Second, func(ctx context.Context) error { return nil }), "the lock was released")
}

func TestDoNotObtained(t *testing.T) {
	c := newCluster(t, 3)
	cl := c.client(t, nil)
	_, err := cl.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	ran := false
	err = cl.Do(ctx, "k", time.Second, func(ctx context.Context) error { ran = true; return nil })
	assert.ErrorIs(t, err, ErrNotObtained)
	assert.False(t, ran)
	assert.ErrorContains(t, cl.Do(t.Context(), "k", time.Second, nil), "nil fn")
}

func TestDoPanicReleases(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	cl := c.client(t, nil)
	assert.PanicsWithValue(t, "fn failed", func() {
		_ = cl.Do(t.Context(), "k", time.Second, func(ctx context.Context) error { panic("fn failed") })
	})
	require.NoError(t, cl.Close())
	assert.Equal(t, 0, c.keys("k"))
}

// TestDoEndsAtClose: Close ends a running Do at once, not at its next
// extension: fn's context is cancelled with ErrLockLost as Close begins,
// since Close releases the lock.
func TestDoEndsAtClose(t *testing.T) {
	leakcheck.Check(t)
	s := redisproc.StartT(t, 3)
	const ttl = time.Minute
	extension := watchSleep(ttl / 3)
	c, err := Open(s.Addrs, &Options{Clock: extension})
	require.NoError(t, err)
	running := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- c.Do(t.Context(), "job", ttl, func(ctx context.Context) error {
			close(running)
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(ttl / 6): // before Do's first extension, at ttl/3
				return errors.New("fn's context outlived Close")
			}
		})
	}()
	<-running
	extension.wait(t, "Do's watch") // until its first extension
	require.NoError(t, c.Close())
	err = <-done
	require.ErrorIs(t, err, ErrLockLost)
	assert.ErrorIs(t, err, ErrClosed)
}
