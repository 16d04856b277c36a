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
// kernel's on the lock keys alone, readers are refused while a writer
// waits or holds, and a writer while a reader holds.
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

	// A writer is refused while a token holds a reader slot, and leaves
	// its intent; readers are then refused until it passes, or while the
	// writer holds, whatever the record says.
	rl := Layer{Role: Reader, Keys: []string{"rw:writer", "rw:limit"}}
	writer := func(token string, intent time.Duration) Cmd {
		wl := Layer{Role: Writer, Keys: []string{"rw:limit"}, Intent: Intent(intent)}
		return p.AcquireCmd(Acquire{Keys: []string{"rw:writer", StateKey}, Token: token, TTL: time.Minute, Layer: wl})
	}
	run := func(cmd Cmd) AcquireReply {
		t.Helper()
		v, err := p.Run(ctx, node, cmd)
		require.NoError(t, err)
		r, err := DecodeAcquire(v)
		require.NoError(t, err)
		return r
	}
	r, _ = acquire("rw:40", "r1", time.Minute, rl)
	require.Equal(t, Granted, r.Kind)
	require.NoError(t, node.Set(ctx, "rw:7", TombstonePrefix+"old", time.Minute).Err()) // tombstones only: no holder
	r = run(writer("t0", 0))
	require.Equal(t, Taken, r.Kind, "a writer while a reader holds")
	assert.Greater(t, r.Wait, 50*time.Second, "the reader's TTL")
	assert.Equal(t, "64", node.Get(ctx, "rw:limit").Val(), "a round without intent leaves none")
	assert.Zero(t, node.Exists(ctx, "rw:writer").Val(), "a refused writer sets nothing")
	wcmd := writer("w1", time.Minute)
	r = run(wcmd)
	require.Equal(t, Taken, r.Kind)
	assert.Regexp(t, `^64w\d+$`, node.Get(ctx, "rw:limit").Val())
	assert.Equal(t, WaitedPrefix+"r1", node.Get(ctx, "rw:40").Val(), "the reader's slot is marked: its release is announced")
	assert.Greater(t, node.PTTL(ctx, "rw:40").Val(), 50*time.Second, "the mark keeps the slot's TTL")
	r, _ = acquire("rw:1", "r2", time.Minute, rl)
	require.Equal(t, WriterWaits, r.Kind)
	assert.Zero(t, node.Exists(ctx, "rw:1").Val())
	require.NoError(t, node.Set(ctx, "rw2:limit", "32", time.Minute).Err()) // a release with another number of readers
	r, _ = acquire("rw2:0", "r2", time.Minute, Layer{Role: Reader, Keys: []string{"rw2:writer", "rw2:limit"}})
	require.Equal(t, Mismatch, r.Kind)
	assert.Equal(t, "32", r.Limit)

	require.NoError(t, node.Del(ctx, "rw:40").Err()) // the reader leaves
	r = run(wcmd)
	require.Equal(t, Granted, r.Kind)
	assert.Zero(t, node.Exists(ctx, "rw:limit").Val(), "no slot is live: the grant deletes the record, and the intent")
	r, _ = acquire("rw:1", "r2", time.Minute, rl)
	require.Equal(t, WriterWaits, r.Kind, "a reader while the writer holds")
	assert.Zero(t, node.Exists(ctx, "rw:1").Val())
	assert.Equal(t, WaitedPrefix+"w1", node.Get(ctx, "rw:writer").Val(), "the writer key is marked: its release is announced")
	require.Equal(t, Taken, run(writer("w2", 0)).Kind, "a second writer")
	require.Equal(t, Granted, run(wcmd).Kind, "the writer's own retry")
	n, err = p.RunInt(ctx, node, p.ReleaseAfter(wcmd, Release{Announce: true}))
	require.NoError(t, err)
	assert.True(t, Held(n))
	r, _ = acquire("rw:1", "r2", time.Minute, rl)
	require.Equal(t, Granted, r.Kind, "the writer is gone")
	assert.Equal(t, "64", node.Get(ctx, "rw:limit").Val())

	// A writer's extend leaves the record alone; a reader's raises it.
	n, err = p.RunInt(ctx, node, p.ExtendIn(Layer{Role: Writer, Keys: []string{"rw:limit"}}, []string{"rw:writer", StateKey}, "w1", time.Hour))
	require.NoError(t, err)
	assert.False(t, Held(n), "the writer released its key")
	ttl := node.PTTL(ctx, "rw:limit").Val()
	assert.LessOrEqual(t, ttl, time.Minute)
	n, err = p.RunInt(ctx, node, p.ExtendIn(rl, []string{"rw:1", StateKey}, "r2", time.Hour))
	require.NoError(t, err)
	assert.True(t, Held(n))
	assert.Greater(t, node.PTTL(ctx, "rw:limit").Val(), 50*time.Minute, "the record outlives the reader's slot")
}
