package redlock

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/faultproxy"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// TestHandOverLateAcquire: a lock obtained while its acquire to a slow node
// is still on the way, and handed over at once by Unlock, leaves nothing
// behind on that node when the acquire lands after the waiter's round took
// the free key there and released it again. The waiter's round was sent
// to the slow node on a connection of its own (the node's batch had been
// in flight for longer than the batch window), so it overtook the acquire
// it was to take over.
func TestHandOverLateAcquire(t *testing.T) {
	leakcheck.Check(t)
	s := redisproc.StartT(t, 5)
	p, err := faultproxy.NewProxy(s.Addrs[4])
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	addrs := append(append([]string(nil), s.Addrs[:4]...), p.Addr())
	cl, err := Open(addrs, &Options{NodeTimeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	ctx := t.Context()

	warm, err := cl.Lock(ctx, "warm", 10*time.Second) // establishes the new deployment
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(ctx))

	const delay = 300 * time.Millisecond
	p.SetLatency(delay, 0)
	a, err := cl.Lock(ctx, "k", 10*time.Second) // decided without the slow node
	require.NoError(t, err)
	got := make(chan *Lock, 1)
	go func() {
		b, err := cl.Lock(ctx, "k", 10*time.Second)
		assert.NoError(t, err)
		got <- b
	}()
	waitQueued(t, cl, "k", 1)
	time.Sleep(20 * time.Millisecond) // past the batch window: b's commands to the slow node go on their own
	p.SetLatency(0, 0)                // and overtake a's acquire
	require.NoError(t, a.Unlock(ctx))
	b := <-got
	require.NotNil(t, b)
	require.NoError(t, b.Unlock(ctx))
	settle(cl) // a's acquire has landed and been answered; what it left is released

	admin := redis.NewClient(&redis.Options{Addr: s.Addrs[4], Protocol: 2})
	t.Cleanup(func() { _ = admin.Close() })
	v, err := admin.Get(ctx, "k").Result()
	if !errors.Is(err, redis.Nil) {
		require.NoError(t, err)
		tok, _ := protocol.Holding(v)
		assert.NotEqual(t, a.Token(), tok, "a's late acquire left its key on the slow node, pttl %v", admin.PTTL(ctx, "k").Val())
		assert.NotEqual(t, b.Token(), tok)
	}
}
