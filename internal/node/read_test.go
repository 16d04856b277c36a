package node

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// TestInLine, on a real server: the key's value as stored and whether the
// member is in the line, and nothing changed on the node.
func TestInLine(t *testing.T) {
	s := redisproc.StartT(t, 1)
	admin := redis.NewClient(&redis.Options{Addr: s.Addrs[0], Protocol: 2})
	t.Cleanup(func() { _ = admin.Close() })
	client := redis.NewClient(options(s.Addrs[0]))
	t.Cleanup(func() { _ = client.Close() })
	n := New(client, "n", &Config{Protocol: protocol.New(time.Minute, false, protocol.Kernel, ""), Clock: clock.Real{}, Checked: true})
	ctx := t.Context()
	const key, line, member = "k", protocol.LinePrefix + "k", "id|token|10000|ch"

	v, queued, err := n.InLine(ctx, key, line, member)
	require.NoError(t, err)
	assert.Equal(t, "", v, "a missing key")
	assert.False(t, queued, "no line")

	held := protocol.WaitedPrefix + "other\n" + protocol.TombstonePrefix + "x"
	require.NoError(t, admin.Set(ctx, key, held, time.Minute).Err())
	require.NoError(t, admin.ZAdd(ctx, line, redis.Z{Score: 1, Member: "id|older|10000|ch"}).Err())
	v, queued, err = n.InLine(ctx, key, line, member)
	require.NoError(t, err)
	assert.Equal(t, held, v)
	assert.False(t, queued, "another entry of the waiter's")

	require.NoError(t, admin.ZAdd(ctx, line, redis.Z{Score: 1, Member: member}).Err())
	_, queued, err = n.InLine(ctx, key, line, member)
	require.NoError(t, err)
	assert.True(t, queued)
	assert.Equal(t, int64(2), admin.ZCard(ctx, line).Val(), "the line as it was")
	assert.Equal(t, held, admin.Get(ctx, key).Val(), "the key as it was")

	require.NoError(t, admin.Set(ctx, line, "not a sorted set", 0).Err())
	_, _, err = n.InLine(ctx, key, line, member)
	assert.ErrorContains(t, err, "WRONGTYPE", "an error of the read is the node's answer")
}
