package redlock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSemaphoreBasic(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	cl := c.client(t, nil)
	sem := cl.Semaphore("reports", 2)
	p1, err := sem.TryAcquire(ctx, time.Second)
	require.NoError(t, err)
	p2, err := sem.TryAcquire(ctx, time.Second)
	require.NoError(t, err)
	assert.NotEqual(t, p1.Slot(), p2.Slot())
	_, err = sem.TryAcquire(ctx, time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	require.NoError(t, p1.Extend(ctx, 2*time.Second))
	require.NoError(t, p1.Release(ctx))
	p3, err := sem.TryAcquire(ctx, time.Second)
	require.NoError(t, err)
	assert.Equal(t, p1.Slot(), p3.Slot())
	require.NoError(t, p2.Release(ctx))
	require.NoError(t, p3.Release(ctx))
}

func TestSemaphoreLimitMismatch(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	a, b := c.client(t, nil), c.client(t, nil)
	p, err := a.Semaphore("reports", 3).TryAcquire(ctx, time.Second)
	require.NoError(t, err)
	_, err = b.Semaphore("reports", 4).TryAcquire(ctx, time.Second)
	require.ErrorIs(t, err, ErrLimitMismatch)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.Contains(t, err.Error(), "limit is 4")
	assert.Contains(t, err.Error(), "with limit 3")
	require.NoError(t, p.Release(ctx))
}

func TestRWMutexBasic(t *testing.T) {
	ctx := t.Context()
	c := newCluster(t, 3)
	cl := c.client(t, nil)
	rw := cl.RWMutex("prices")
	r1, err := rw.TryRLock(ctx, time.Second)
	require.NoError(t, err)
	r2, err := rw.TryRLock(ctx, time.Second)
	require.NoError(t, err)
	_, err = rw.TryLock(ctx, time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	r4, err := rw.TryRLock(ctx, time.Second) // TryLock left no intent
	require.NoError(t, err)
	require.NoError(t, r4.Unlock(ctx))
	require.NoError(t, r1.Unlock(ctx))
	require.NoError(t, r2.Unlock(ctx))
	w, err := rw.TryLock(ctx, time.Second)
	require.NoError(t, err)
	_, err = rw.TryRLock(ctx, time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	require.NoError(t, w.Extend(ctx, time.Second))
	require.NoError(t, w.Unlock(ctx))
	r3, err := rw.TryRLock(ctx, time.Second)
	require.NoError(t, err)
	require.NoError(t, r3.Unlock(ctx))
}

var _ = strings.Contains
var _ sync.Mutex
var _ atomic.Int32
var _ = errors.Is
var _ context.Context
