package test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/faultproxy"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/redlock"
)

// TestDeadlineKeepsCause: when the caller's context ends Lock's wait, the
// line names the cause of the last rounds before the context's error, and
// errors.Is finds both.
func TestDeadlineKeepsCause(t *testing.T) {
	leakcheck.Check(t)
	addrs, direct := five(t)
	holder := open(t, addrs, nil)
	c := open(t, addrs, nil)
	ctx := t.Context()
	l, err := holder.Lock(ctx, "busy", time.Minute)
	require.NoError(t, err)
	waitHeldEverywhere(t, direct, "busy", l.Token())

	dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = c.Lock(dctx, "busy", time.Second)
	assert.Regexp(t, `^redlock: lock "busy": not obtained \(0 of 5 nodes, 3 needed\): held by another owner on [345] nodes; context deadline exceeded$`, err.Error())
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, redlock.ErrTaken)

	cctx, cancelNow := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, cancelNow)
	_, err = c.Lock(cctx, "busy", time.Second)
	assert.Regexp(t, `: held by another owner on [345] nodes; context canceled$`, err.Error())
	assert.ErrorIs(t, err, context.Canceled)

	// The restart guard, with a deadline.
	warm, err := c.Lock(ctx, "warm", time.Second)
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(ctx))
	for _, d := range direct[:3] {
		require.NoError(t, d.FlushAll(ctx).Err())
	}
	gctx, cancelGuard := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelGuard()
	_, err = c.Lock(gctx, "job", time.Second)
	assert.Regexp(t, `^redlock: lock "job": not obtained \(\d of 5 nodes, 3 needed\): restart guard on 3 nodes, \S+ left; context deadline exceeded$`, err.Error())
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, redlock.ErrGuarded)
}

// TestDeadlineDuringRound: a deadline that expires during a round, before
// the nodes that the network holds up answer, still names what the nodes
// told, in that round or the one before.
func TestDeadlineDuringRound(t *testing.T) {
	leakcheck.Check(t)
	addrs, direct := five(t)
	var proxied []string
	var proxies []*faultproxy.Proxy
	for _, a := range addrs {
		p, err := faultproxy.NewProxy(a)
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		proxies, proxied = append(proxies, p), append(proxied, p.Addr())
	}
	holder := open(t, addrs, nil)
	l, err := holder.Lock(t.Context(), "busy", time.Minute)
	require.NoError(t, err)
	waitHeldEverywhere(t, direct, "busy", l.Token())
	c := open(t, proxied, &redlock.Options{NodeTimeout: 5 * time.Second, MinRetryDelay: time.Millisecond, MaxRetryDelay: time.Millisecond})
	t.Cleanup(func() {
		for _, p := range proxies {
			p.Heal() // before the Client closes
		}
	})

	ctx, cancel := context.WithTimeout(t.Context(), 600*time.Millisecond)
	defer cancel()
	time.AfterFunc(200*time.Millisecond, func() {
		for _, p := range proxies {
			p.Partition()
		}
	})
	_, err = c.Lock(ctx, "busy", time.Second)
	require.Error(t, err)
	assert.Regexp(t, `^redlock: lock "busy": not obtained \(0 of 5 nodes, 3 needed\): held by another owner on [1-5] nodes?; context deadline exceeded$`, err.Error())
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, redlock.ErrTaken)
}
