package protocol

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRecord: a record survives its stored form, a value with new lines
// included, and what is not a record is refused.
func TestRecord(t *testing.T) {
	r := Record{Term: 7, Rev: 2, Token: "tok.owner a", Value: "line 1\nline 2"}
	got, ok := ParseRecord(r.String())
	require.True(t, ok)
	assert.Equal(t, r, got)
	for _, bad := range []string{"", "7\n2\ntok", "x\n2\ntok\nv", "7\n2\n\nv"} {
		_, ok := ParseRecord(bad)
		assert.False(t, ok, "%q", bad)
	}
}

// TestElectScript runs elect.lua on a real server: a record is written
// only while the lock key holds the token (marked or not), with the lock
// key's TTL, and announced when asked; a withdrawal deletes only the
// token's own record.
func TestElectScript(t *testing.T) {
	ctx := t.Context()
	node := oneNode(t, true)
	p := New(time.Minute, true, InLine, "")
	keys := []string{"e", LeaderPrefix + "e"}
	sub := node.Subscribe(ctx, ReleasedChannel+keys[1])
	t.Cleanup(func() { _ = sub.Close() })
	_, err := sub.Receive(ctx)
	require.NoError(t, err)
	messages := sub.Channel()
	rec := Record{Term: 3, Rev: 1, Token: "tok", Value: "v"}.String()
	elect := func(token, record string, announce bool) int64 {
		t.Helper()
		n, err := p.RunInt(ctx, node, p.Elect(keys, token, record, announce))
		require.NoError(t, err)
		return n
	}

	assert.EqualValues(t, 0, elect("tok", rec, true), "no lock: nothing written")
	assert.EqualValues(t, 0, node.Exists(ctx, keys[1]).Val())
	require.NoError(t, node.Set(ctx, "e", WaitedPrefix+"tok", 10*time.Second).Err())
	assert.EqualValues(t, 0, elect("other", rec, true), "another token: nothing written")
	assert.EqualValues(t, 1, elect("tok", rec, true))
	assert.Equal(t, rec, node.Get(ctx, keys[1]).Val())
	ttl := node.PTTL(ctx, keys[1]).Val()
	assert.Greater(t, ttl, 9*time.Second)
	assert.LessOrEqual(t, ttl, 10*time.Second, "the record expires with the lock")
	select {
	case m := <-messages:
		assert.Empty(t, m.Payload)
	case <-time.After(5 * time.Second):
		t.Fatal("the write was not announced")
	}
	assert.EqualValues(t, 0, elect("other", "", true), "another token's withdrawal")
	assert.Equal(t, rec, node.Get(ctx, keys[1]).Val())
	assert.EqualValues(t, 1, elect("tok", "", false))
	assert.EqualValues(t, 0, node.Exists(ctx, keys[1]).Val())
}
