package scripts

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunInt runs a script by SHA, loads it after NOSCRIPT (first use, and
// after SCRIPT FLUSH), and reports errors.
func TestRunInt(t *testing.T) {
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()
	require.NoError(t, m.Set("a", "tok"))
	require.NoError(t, m.Set("b", "tok"))

	v, err := RunInt(ctx, c, Args(Release, []string{"a", "b"}, "other", "0"))
	require.NoError(t, err, "first call: NOSCRIPT, then EVAL")
	assert.Zero(t, v, "another token: left alone")
	assert.True(t, m.Exists("a"))

	require.NoError(t, c.ScriptFlush(ctx).Err())
	v, err = RunInt(ctx, c, Args(Release, []string{"a", "b"}, "tok", "1"))
	require.NoError(t, err, "after SCRIPT FLUSH the script is loaded again")
	assert.Equal(t, int64(1), v)
	assert.False(t, m.Exists("a"))
	assert.False(t, m.Exists("b"))

	m.Close()
	_, err = RunInt(ctx, c, Args(Release, []string{"a"}, "tok", "1"))
	assert.Error(t, err)
}

// TestSub builds a release from an acquire's arguments: the first keys and
// the token are shared, the state key and the acquire's other ARGV are not.
func TestSub(t *testing.T) {
	acq := Args(Acquire, []string{"a", "b", "state"}, "tok", int64(1000), int64(0), "", "0")
	assert.Equal(t, "tok", Argv(acq, 1))
	assert.Equal(t, int64(1000), Argv(acq, 2))
	assert.Equal(t, "0", Argv(acq, 5))
	rel := Sub(Release, acq, 2, Argv(acq, 1), "1")
	assert.Equal(t, Args(Release, []string{"a", "b"}, "tok", "1"), rel)
	assert.Equal(t, []any{"evalsha", Release.Hash(), 1, "a", "x"}, Sub(Release, acq, 1, "x"))
}
