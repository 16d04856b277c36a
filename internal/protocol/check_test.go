package protocol

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// TestCheck runs check.lua on a real master and its replica: it records the
// master's replication ID, finds it again, refuses the replica, and starts
// the guard (dropping the fence counter) once the replica is promoted, and
// only records the new ID when the guard is off.
func TestCheck(t *testing.T) {
	redisproc.Require(t)
	ctx := t.Context()
	g, err := redisproc.StartGroup(ctx, "g", false)
	require.NoError(t, err)
	t.Cleanup(g.Stop)
	master := redis.NewClient(&redis.Options{Addr: g.Master, Protocol: 2})
	replica := redis.NewClient(&redis.Options{Addr: g.Replica, Protocol: 2})
	t.Cleanup(func() { _, _ = master.Close(), replica.Close() })
	p := New(time.Minute, true, Kernel, "")
	check := func(c *redis.Client, p *Protocol) CheckReply {
		t.Helper()
		v, err := p.Run(ctx, c, p.Check(StateKey))
		require.NoError(t, err)
		r, err := DecodeCheck(v)
		require.NoError(t, err)
		return r
	}

	first := check(master, p)
	assert.Equal(t, Same, first.Kind, "no state: the ID is recorded")
	assert.Len(t, first.ID, 40)
	assert.Equal(t, map[string]string{"r": first.ID}, master.HGetAll(ctx, StateKey).Val(), "nothing but the ID: the first acquire starts the guard")
	require.NoError(t, master.HSet(ctx, StateKey, "g", "0", "id", "round", "f", "41").Err())
	assert.Equal(t, CheckReply{Kind: Same, ID: first.ID}, check(master, p))
	assert.Equal(t, CheckReply{Kind: NotMaster, Detail: "slave"}, check(replica, p))

	require.Eventually(t, func() bool { return replica.HGet(ctx, StateKey, "f").Val() == "41" }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, replica.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
	promoted := check(replica, p)
	assert.Equal(t, Changed, promoted.Kind)
	assert.NotEqual(t, first.ID, promoted.ID)
	assert.InDelta(t, time.Minute, promoted.Guard, float64(time.Second))
	state := replica.HGetAll(ctx, StateKey).Val()
	assert.Equal(t, promoted.ID, state["r"])
	assert.Equal(t, promoted.ID, state["id"], "an id no other node has: not a new deployment")
	assert.NotContains(t, state, "f", "the fence counter is unknown")
	assert.Equal(t, CheckReply{Kind: Same, ID: promoted.ID}, check(replica, p), "once per server")

	// With the guard off only the ID changes.
	require.NoError(t, master.HSet(ctx, StateKey, "r", "other").Err())
	assert.Equal(t, CheckReply{Kind: Same, ID: first.ID}, check(master, New(0, false, Kernel, "")))
	assert.Equal(t, "0", master.HGet(ctx, StateKey, "g").Val())
	assert.Equal(t, "41", master.HGet(ctx, StateKey, "f").Val())

	// Data lost under open connections (FLUSHALL): the acquire that finds
	// no state starts the guard and records the server's own ID, so that
	// a connection opened later to the same server is not guarded again.
	require.NoError(t, master.FlushAll(ctx).Err())
	v, err := p.Run(ctx, master, p.AcquireCmd(Acquire{Keys: []string{"k", StateKey}, Token: "tok", TTL: time.Second}))
	require.NoError(t, err)
	a, err := DecodeAcquire(v)
	require.NoError(t, err)
	assert.Equal(t, Guarded, a.Kind)
	assert.Equal(t, first.ID, master.HGet(ctx, StateKey, "r").Val())
	guardUntil := master.HGet(ctx, StateKey, "g").Val()
	assert.Equal(t, CheckReply{Kind: Same, ID: first.ID}, check(master, p))
	assert.Equal(t, guardUntil, master.HGet(ctx, StateKey, "g").Val(), "the guard the acquire began, neither ended nor restarted")

	// The same after a FLUSHALL found by an extend.
	require.NoError(t, master.FlushAll(ctx).Err())
	ext, err := p.Run(ctx, master, p.Extend([]string{"k", StateKey}, "tok", time.Second))
	require.NoError(t, err)
	assert.EqualValues(t, 0, ext, "nothing to extend")
	assert.Equal(t, first.ID, master.HGet(ctx, StateKey, "r").Val(), "the extend that made the state recorded the server's ID")
	guardUntil = master.HGet(ctx, StateKey, "g").Val()
	assert.NotEqual(t, "0", guardUntil, "and began the guard")

	// A state that an earlier version marked '?' (ID unknown) takes the
	// server's ID as a new state does.
	require.NoError(t, master.HSet(ctx, StateKey, "r", "?").Err())
	assert.Equal(t, CheckReply{Kind: Same, ID: first.ID}, check(master, p))
	assert.Equal(t, first.ID, master.HGet(ctx, StateKey, "r").Val())
	assert.Equal(t, guardUntil, master.HGet(ctx, StateKey, "g").Val())
}

// TestCheckUnreadable: a user whose ACL denies INFO gets Unchecked, and
// nothing is written.
func TestCheckUnreadable(t *testing.T) {
	redisproc.Require(t)
	ctx := context.Background()
	s, err := redisproc.Start(ctx, 1)
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	admin := redis.NewClient(&redis.Options{Addr: s.Addrs[0], Protocol: 2})
	t.Cleanup(func() { _ = admin.Close() })
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "locker", "on", ">pw", "~*", "+@all", "-info").Err())
	locker := redis.NewClient(&redis.Options{Addr: s.Addrs[0], Protocol: 2, Username: "locker", Password: "pw"})
	t.Cleanup(func() { _ = locker.Close() })
	p := New(time.Minute, false, Kernel, "")
	v, err := p.Run(ctx, locker, p.Check(StateKey))
	require.NoError(t, err)
	r, err := DecodeCheck(v)
	require.NoError(t, err)
	assert.Equal(t, Unchecked, r.Kind)
	assert.Contains(t, r.Detail, "can't run this command")
	assert.Zero(t, admin.Exists(ctx, StateKey).Val())
}
