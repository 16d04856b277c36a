package test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/redlock"
)

// Habits that users bring from other lock libraries, on real servers.

// noKey asserts that no node has key, tombstones included.
func noKey(t *testing.T, direct []*redis.Client, key string) {
	t.Helper()
	for i, d := range direct {
		assert.Zero(t, d.Exists(context.Background(), key).Val(), "node %d has %q", i, key)
	}
}

// TestNilLock: the nil *Lock of a failed TryLock answers every method
// without a panic, as a deferred Unlock before the error check calls it.
func TestNilLock(t *testing.T) {
	leakcheck.Check(t)
	addrs, _ := five(t)
	c := open(t, addrs, nil)
	ctx := t.Context()
	held, err := c.Lock(ctx, "busy", 10*time.Second)
	require.NoError(t, err)

	l, err := c.TryLock(ctx, "busy", time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.Nil(t, l)
	err = l.Unlock(ctx)
	require.ErrorIs(t, err, redlock.ErrNotHeld)
	assert.Equal(t, "redlock: unlock on a nil Lock: not held (the lock call that returned it failed)", err.Error())
	assert.ErrorIs(t, l.Extend(ctx, time.Second), redlock.ErrNotHeld)
	_, err = l.TTL(ctx)
	assert.ErrorIs(t, err, redlock.ErrNotHeld)
	assert.True(t, l.Until().IsZero())
	assert.Zero(t, l.Fence())
	assert.Empty(t, l.Key())
	assert.Nil(t, l.Keys())
	assert.Empty(t, l.Token())
	require.NoError(t, held.Unlock(ctx))
}

// TestUntilAfterUnlock: once unlocked, a lock is valid until the zero
// time, and Extend refuses it.
func TestUntilAfterUnlock(t *testing.T) {
	leakcheck.Check(t)
	addrs, _ := five(t)
	c := open(t, addrs, nil)
	ctx := t.Context()
	l, err := c.Lock(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	require.True(t, l.Until().After(time.Now()))
	require.NoError(t, l.Unlock(ctx))
	assert.True(t, l.Until().IsZero(), "Until after Unlock: %v", l.Until())
	assert.ErrorIs(t, l.Extend(ctx, 10*time.Second), redlock.ErrNotHeld)
}

// TestExtendCancelledContext: Extend with a context already done sends
// nothing and reports the context's error, not ErrNotHeld: the lock is
// still held, and a later Extend succeeds.
func TestExtendCancelledContext(t *testing.T) {
	leakcheck.Check(t)
	addrs, direct := five(t)
	c := open(t, addrs, nil)
	l, err := c.Lock(t.Context(), "k", 10*time.Second)
	require.NoError(t, err)
	waitHeldEverywhere(t, direct, "k", l.Token())
	until := l.Until()

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err = l.Extend(ctx, time.Minute)
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, redlock.ErrNotHeld)
	assert.Equal(t, `redlock: extend "k": context canceled`, err.Error())
	assert.Equal(t, until, l.Until())
	for i, d := range direct {
		assert.LessOrEqual(t, d.PTTL(t.Context(), "k").Val(), 10*time.Second, "node %d was extended", i)
	}
	require.NoError(t, l.Extend(t.Context(), time.Minute))
	require.NoError(t, l.Unlock(t.Context()))
}

// TestLockCancelledContext: Lock, TryLock and LockMany with a context
// already done send nothing (no key, no tombstone) and report both
// ErrNotObtained and the context's error.
func TestLockCancelledContext(t *testing.T) {
	leakcheck.Check(t)
	addrs, direct := five(t)
	c := open(t, addrs, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := c.Lock(ctx, "a", time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, `redlock: lock "a": not obtained: context canceled`, err.Error())
	_, err = c.TryLock(ctx, "b", time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.ErrorIs(t, err, context.Canceled)
	_, err = c.LockMany(ctx, []string{"c", "d"}, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotObtained)
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, c.Close()) // waits for anything sent
	for _, k := range []string{"a", "b", "c", "d"} {
		noKey(t, direct, k)
	}
}

// TestCloseReleasesHeldLocks: Close releases the locks its Client still
// holds, on every node, before it returns; a Do running then sees its lock
// lost. Another Client can take them at once.
func TestCloseReleasesHeldLocks(t *testing.T) {
	leakcheck.Check(t)
	addrs, direct := five(t)
	c, err := redlock.Open(addrs, nil)
	require.NoError(t, err)
	other := open(t, addrs, nil)
	ctx := t.Context()

	a, err := c.Lock(ctx, "a", time.Minute)
	require.NoError(t, err)
	_, err = c.TryLockMany(ctx, []string{"b", "c"}, time.Minute)
	require.NoError(t, err)
	done, err := c.Lock(ctx, "done", time.Minute)
	require.NoError(t, err)
	require.NoError(t, done.Unlock(ctx))

	running := make(chan struct{})
	doErr := make(chan error, 1)
	var cause atomic.Value
	go func() {
		doErr <- c.Do(ctx, "job", time.Minute, func(ctx context.Context) error {
			close(running)
			<-ctx.Done()
			cause.Store(context.Cause(ctx))
			return ctx.Err()
		})
	}()
	<-running
	waitHeldEverywhere(t, direct, "a", a.Token())

	require.NoError(t, c.Close())
	for _, k := range []string{"a", "b", "c", "job"} {
		noKey(t, direct, k)
	}
	assert.True(t, a.Until().IsZero(), "Close unlocked a")
	require.ErrorIs(t, a.Unlock(ctx), redlock.ErrNotHeld, "already released by Close")
	require.ErrorIs(t, <-doErr, redlock.ErrLockLost)
	assert.ErrorIs(t, cause.Load().(error), redlock.ErrLockLost)

	l, err := other.TryLockMany(ctx, []string{"a", "b", "c", "job"}, time.Second)
	require.NoError(t, err, "free at once after Close")
	require.NoError(t, l.Unlock(ctx))
}

// TestHolderFreeKey: Holder reports the zero Holder, without an error,
// for a key that a quorum of nodes agree is free; split holders are an
// error.
func TestHolderFreeKey(t *testing.T) {
	leakcheck.Check(t)
	addrs, direct := five(t)
	c := open(t, addrs, nil)
	ctx := t.Context()
	h, err := c.Holder(ctx, "never-locked")
	require.NoError(t, err)
	assert.Equal(t, redlock.Holder{}, h)

	for i, d := range direct[:4] {
		owner := []string{"x.a", "x.b"}[i%2]
		require.NoError(t, d.Set(ctx, "split", owner, time.Minute).Err())
	}
	_, err = c.Holder(ctx, "split")
	require.ErrorIs(t, err, redlock.ErrNotHeld)
	assert.Contains(t, err.Error(), "no holder on a quorum of nodes")
}
