package protocol

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLayerOnRedis runs the limit layer's scripts on a real server: the
// record keeps the limit at least as long as any slot, another limit is
// refused with the recorded one, the release of a layered acquire is the
// kernel's on the lock keys alone, and readers are refused while a
// writer waits or holds.
func TestLayerOnRedis(t *testing.T) {
	ctx := t.Context()
	node := oneNode(t, true)
	p := New(time.Minute, false, Announce, "")
	slot := func(limit string) Layer { return Layer{Role: Slot, Keys: []string{"sem:limit"}, Limit: limit} }
	acquire := func(key, token string, ttl time.Duration, l Layer) (AcquireReply, Cmd) {
		t.Helper()
		cmd := p.AcquireCmd(Acquire{Keys: []string{key, StateKey}, Token: token, TTL: ttl, Layer: l})
		v, err := p.Run(ctx, node, cmd)
		require.NoError(t, err)
		r, err := DecodeAcquire(v)
		require.NoError(t, err)
		return r, cmd
	}

	r, cmd := acquire("sem:0", "a", time.Minute, slot("3"))
	require.Equal(t, Granted, r.Kind)
	assert.Equal(t, "3", node.Get(ctx, "sem:limit").Val())
	r, _ = acquire("sem:1", "b", 10*time.Second, slot("3"))
	require.Equal(t, Granted, r.Kind)
	assert.Greater(t, node.PTTL(ctx, "sem:limit").Val(), 50*time.Second, "a shorter slot never shortens the record")
	r, _ = acquire("sem:3", "c", time.Minute, slot("4"))
	require.Equal(t, Mismatch, r.Kind)
	assert.Equal(t, "3", r.Limit)
	assert.Zero(t, node.Exists(ctx, "sem:3").Val(), "a refused limit sets nothing")

	// The release of a layered acquire deletes the slot, not the record.
	n, err := p.RunInt(ctx, node, p.ReleaseAfter(cmd, Release{Announce: true}))
	require.NoError(t, err)
	assert.True(t, Held(n))
	assert.Zero(t, node.Exists(ctx, "sem:0").Val())
	assert.Equal(t, "3", node.Get(ctx, "sem:limit").Val())

	// Extend raises the record's TTL with the slot's.
	require.NoError(t, node.PExpire(ctx, "sem:limit", 20*time.Second).Err())
	n, err = p.RunInt(ctx, node, p.ExtendIn(slot("3"), []string{"sem:1", StateKey}, "b", 2*time.Minute))
	require.NoError(t, err)
	assert.True(t, Held(n))
	assert.Greater(t, node.PTTL(ctx, "sem:limit").Val(), 100*time.Second)

	// A writer refused by a reader leaves its intent; readers are then
	// refused until it passes, or while the writer holds.
	rl := Layer{Role: Reader, Keys: []string{"rw:writer", "rw:limit"}}
	wl := Layer{Role: Writer, Keys: []string{"rw:limit"}, Intent: Intent(time.Minute)}
	r, _ = acquire("rw:0", "r1", time.Minute, rl)
	require.Equal(t, Granted, r.Kind)
	wcmd := p.AcquireCmd(Acquire{Keys: []string{"rw:writer", "rw:0", "rw:1", StateKey}, Token: "w1", TTL: time.Minute, Layer: wl})
	v, err := p.Run(ctx, node, wcmd)
	require.NoError(t, err)
	r, err = DecodeAcquire(v)
	require.NoError(t, err)
	require.Equal(t, Taken, r.Kind)
	assert.Regexp(t, `^64w\d+$`, node.Get(ctx, "rw:limit").Val())
	r, _ = acquire("rw:1", "r2", time.Minute, rl)
	require.Equal(t, WriterWaits, r.Kind)
	assert.Zero(t, node.Exists(ctx, "rw:1").Val())
	require.NoError(t, node.Set(ctx, "rw2:limit", "32", time.Minute).Err()) // a release with another number of readers
	r, _ = acquire("rw2:0", "r2", time.Minute, Layer{Role: Reader, Keys: []string{"rw2:writer", "rw2:limit"}})
	require.Equal(t, Mismatch, r.Kind)
	assert.Equal(t, "32", r.Limit)

	require.NoError(t, node.Del(ctx, "rw:0").Err()) // the reader leaves
	v, err = p.Run(ctx, node, wcmd)
	require.NoError(t, err)
	r, err = DecodeAcquire(v)
	require.NoError(t, err)
	require.Equal(t, Granted, r.Kind)
	assert.Equal(t, "64w0", node.Get(ctx, "rw:limit").Val(), "the writer holds")
	r, _ = acquire("rw:1", "r2", time.Minute, rl)
	require.Equal(t, WriterWaits, r.Kind)
	assert.Equal(t, WaitedPrefix+"w1", node.Get(ctx, "rw:writer").Val(), "the writer key is marked: its release is announced")
	n, err = p.RunInt(ctx, node, p.ReleaseAfter(wcmd, Release{Announce: true}))
	require.NoError(t, err)
	assert.True(t, Held(n))
	r, _ = acquire("rw:1", "r2", time.Minute, rl)
	require.Equal(t, Granted, r.Kind, "the writer is gone")
	assert.Equal(t, "64", node.Get(ctx, "rw:limit").Val())
}
