package node

import (
	"context"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// TestChecksShared: the nodes made on one client share its OnConnect, which
// runs the client's own OnConnect and the check of every node whose lock
// client is not closing, once per new connection; making and closing many
// lock clients on one client leaves its OnConnect one call deep.
func TestChecksShared(t *testing.T) {
	s := redisproc.StartT(t, 1)
	ctx := t.Context()
	userCalls := 0
	client := redis.NewClient(&redis.Options{Addr: s.Addrs[0], Protocol: 2, OnConnect: func(context.Context, *redis.Conn) error {
		userCalls++
		return nil
	}})
	t.Cleanup(func() { _ = client.Close() })
	newNode := func(prefix string) chan struct{} {
		closing := make(chan struct{})
		New(client, s.Addrs[0], &Config{Prefix: prefix, Protocol: protocol.New(time.Minute, false, protocol.Kernel, ""), Clock: clock.Real{},
			Log: slog.New(slog.DiscardHandler), Closing: closing})
		return closing
	}
	a := newNode("a:")
	for range 100 {
		close(newNode("gone:"))
	}
	newNode("b:")

	require.NoError(t, client.Ping(ctx).Err())
	assert.Equal(t, 1, userCalls, "the client's own OnConnect still runs")
	id := client.Info(ctx, "replication").Val()
	for _, p := range []string{"a:", "b:"} {
		r := client.HGet(ctx, p+protocol.StateKey, "r").Val()
		assert.Len(t, r, 40, "%s checked", p)
		assert.Contains(t, id, "master_replid:"+r)
	}
	assert.Zero(t, client.Exists(ctx, "gone:"+protocol.StateKey).Val(), "closed lock clients check nothing")

	cs := probe(t, client)
	assert.Len(t, cs.live, 2, "the closed ones were dropped")
	assert.NotNil(t, cs.prev)
	assert.Nil(t, probe(t, redis.NewClient(&redis.Options{})), "a client without checks")

	close(a)
	require.NoError(t, client.HDel(ctx, "b:"+protocol.StateKey, "r").Err())
	_ = client.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "no").Err() // every connection, its own too
	require.Eventually(t, func() bool { return client.Ping(ctx).Err() == nil }, 5*time.Second, 10*time.Millisecond)
	assert.Len(t, client.HGet(ctx, "b:"+protocol.StateKey, "r").Val(), 40, "a new connection is checked again")
	assert.Len(t, probe(t, client).live, 1)
}

// probe returns the checks behind client's OnConnect, or nil.
func probe(t *testing.T, client *redis.Client) *checks {
	t.Helper()
	cs := checksOf(client.Options().OnConnect)
	if cs == nil {
		return nil
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return &checks{prev: cs.prev, live: cs.live}
}

// TestOwnOnConnect: a client made from a copy of another's options, with
// OwnOnConnect, runs the other's own OnConnect but gets checks of its own:
// the nodes made on it leave the other's checks alone.
func TestOwnOnConnect(t *testing.T) {
	own := func(context.Context, *redis.Conn) error { return nil }
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", OnConnect: own})
	t.Cleanup(func() { _ = client.Close() })
	cfg := &Config{Protocol: protocol.New(time.Minute, false, protocol.Kernel, ""), Clock: clock.Real{}, Log: slog.New(slog.DiscardHandler), Closing: make(chan struct{})}
	New(client, "a", cfg)
	require.NotNil(t, probe(t, client))

	addr := func(f func(context.Context, *redis.Conn) error) uintptr { return reflect.ValueOf(f).Pointer() }
	assert.Equal(t, addr(own), addr(OwnOnConnect(client.Options().OnConnect)), "the checks' previous OnConnect")
	assert.Equal(t, addr(own), addr(OwnOnConnect(own)), "an OnConnect without checks")
	assert.Nil(t, OwnOnConnect(nil))

	o := *client.Options()
	o.OnConnect = OwnOnConnect(o.OnConnect)
	copied := redis.NewClient(&o)
	t.Cleanup(func() { _ = copied.Close() })
	New(copied, "b", cfg)
	assert.Len(t, probe(t, client).live, 1, "the other client's checks")
	cs := probe(t, copied)
	require.NotNil(t, cs)
	assert.Len(t, cs.live, 1)
	assert.Equal(t, addr(own), addr(cs.prev))
}
