package scripts

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunInt runs the scripts by SHA, loads them after NOSCRIPT, and
// reports errors.
func TestRunInt(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()

	v, err := RunInt(ctx, c, Args(Acquire, "k", "tok", int64(10000)))
	require.NoError(t, err, "first call: NOSCRIPT, then EVAL")
	assert.Zero(t, v)
	held, err := RunInt(ctx, c, Args(Acquire, "k", "other", int64(10000)))
	require.NoError(t, err)
	assert.Positive(t, held, "taken: the holder's remaining TTL")

	m.FlushAll()
	require.NoError(t, c.ScriptFlush(ctx).Err())
	v, err = RunInt(ctx, c, Args(Acquire, "k", "tok", int64(10000)))
	require.NoError(t, err, "after SCRIPT FLUSH the script is loaded again")
	assert.Zero(t, v)
	v, err = RunInt(ctx, c, Args(Release, "k", "tok", "1"))
	require.NoError(t, err)
	assert.Equal(t, int64(1), v)
	assert.False(t, m.Exists("k"))

	m.Close()
	_, err = RunInt(ctx, c, Args(Release, "k", "tok", "1"))
	assert.Error(t, err)
}
