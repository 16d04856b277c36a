package protocol

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// TestCheck runs check.lua on a real master and its replica: it records the
// master's run_id and replication ID, finds them again, refuses the
// replica, and starts the guard (dropping the fence counter, marking the
// state 'x') once the replica is promoted, and only records the new
// identity when the guard is off.
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
		return runCheck(t, c, p)
	}

	first := check(master, p)
	assert.Equal(t, Same, first.Kind, "no state: the identity is recorded")
	assert.Equal(t, info(t, master, "server", "run_id"), first.ID)
	assert.Equal(t, map[string]string{"p": first.ID, "r": info(t, master, "replication", "master_replid")}, master.HGetAll(ctx, StateKey).Val(), "nothing but the identity: the first acquire starts the guard")
	require.NoError(t, master.HSet(ctx, StateKey, "g", "0", "id", "round", "f", "41").Err())
	assert.Equal(t, CheckReply{Kind: Same, ID: first.ID}, check(master, p))
	assert.Equal(t, CheckReply{Kind: NotMaster, Detail: "slave"}, check(replica, p))

	require.Eventually(t, func() bool { return replica.HGet(ctx, StateKey, "f").Val() == "41" }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, replica.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
	promoted := check(replica, p)
	assert.Equal(t, Changed, promoted.Kind)
	assert.Equal(t, info(t, replica, "server", "run_id"), promoted.ID)
	assert.NotEqual(t, first.ID, promoted.ID)
	assert.InDelta(t, time.Minute, promoted.Guard, float64(time.Second))
	state := replica.HGetAll(ctx, StateKey).Val()
	assert.Equal(t, promoted.ID, state["p"])
	assert.Equal(t, promoted.ID, state["id"], "an id no other node has: not a new deployment")
	assert.Equal(t, "x", state["v"], "a mark that no shortcut ends")
	assert.NotContains(t, state, "f", "the fence counter is unknown")
	assert.Equal(t, CheckReply{Kind: Same, ID: promoted.ID}, check(replica, p), "once per server")

	// With the guard off only the identity changes.
	require.NoError(t, master.HSet(ctx, StateKey, "p", "other").Err())
	assert.Equal(t, CheckReply{Kind: Same, ID: first.ID}, check(master, New(0, false, Kernel, "")))
	assert.Equal(t, "0", master.HGet(ctx, StateKey, "g").Val())
	assert.Equal(t, "41", master.HGet(ctx, StateKey, "f").Val())

	// Data lost under open connections (FLUSHALL): the acquire that finds
	// no state starts the guard and records the server's own identity, so
	// that a connection opened later to the same server is not guarded
	// again.
	require.NoError(t, master.FlushAll(ctx).Err())
	v, err := p.Run(ctx, master, p.AcquireCmd(Acquire{Keys: []string{"k", StateKey}, Token: "tok", TTL: time.Second}))
	require.NoError(t, err)
	a, err := DecodeAcquire(v)
	require.NoError(t, err)
	assert.Equal(t, Guarded, a.Kind)
	assert.Equal(t, first.ID, master.HGet(ctx, StateKey, "p").Val())
	guardUntil := master.HGet(ctx, StateKey, "g").Val()
	assert.Equal(t, CheckReply{Kind: Same, ID: first.ID}, check(master, p))
	assert.Equal(t, guardUntil, master.HGet(ctx, StateKey, "g").Val(), "the guard the acquire began, neither ended nor restarted")

	// The same after a FLUSHALL found by an extend.
	require.NoError(t, master.FlushAll(ctx).Err())
	ext, err := p.Run(ctx, master, p.Extend([]string{"k", StateKey}, "tok", time.Second))
	require.NoError(t, err)
	assert.EqualValues(t, 0, ext, "nothing to extend")
	assert.Equal(t, first.ID, master.HGet(ctx, StateKey, "p").Val(), "the extend that made the state recorded the server's run_id")
	guardUntil = master.HGet(ctx, StateKey, "g").Val()
	assert.NotEqual(t, "0", guardUntil, "and began the guard")

	// A state that an earlier version wrote (no process, its ID unknown:
	// '?') takes the server's identity as a new state does.
	require.NoError(t, master.HDel(ctx, StateKey, "p").Err())
	require.NoError(t, master.HSet(ctx, StateKey, "r", "?").Err())
	assert.Equal(t, CheckReply{Kind: Same, ID: first.ID}, check(master, p))
	assert.Equal(t, first.ID, master.HGet(ctx, StateKey, "p").Val())
	assert.Equal(t, guardUntil, master.HGet(ctx, StateKey, "g").Val())
}

// TestCheckHealthyMaster: a master's own replication events change its
// master_replid without losing a key (the first replica attaching creates
// the backlog; the backlog freed after repl-backlog-ttl): the check takes
// neither for a loss. A restart from its own snapshot is another process,
// whose file may be older than its memory was: guarded.
func TestCheckHealthyMaster(t *testing.T) {
	redisproc.Require(t)
	ctx := t.Context()
	s, err := redisproc.Start(ctx, 2)
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	master := redis.NewClient(&redis.Options{Addr: s.Addrs[0], Protocol: 2})
	other := redis.NewClient(&redis.Options{Addr: s.Addrs[1], Protocol: 2})
	t.Cleanup(func() { _, _ = master.Close(), other.Close() })
	p := New(time.Minute, true, Kernel, "")
	first := runCheck(t, master, p)
	require.Equal(t, Same, first.Kind)
	require.NoError(t, master.HSet(ctx, StateKey, "g", "0", "id", "round", "f", "41").Err())
	id := info(t, master, "replication", "master_replid")
	inService := map[string]string{"g": "0", "id": "round", "f": "41", "p": first.ID}

	// A replica attaches: the master's replication ID changes.
	host, port, _ := net.SplitHostPort(s.Addrs[0])
	require.NoError(t, other.Do(ctx, "REPLICAOF", host, port).Err())
	require.Eventually(t, func() bool { return info(t, master, "replication", "master_replid") != id }, 10*time.Second, 10*time.Millisecond)
	assert.Equal(t, CheckReply{Kind: Same, ID: first.ID}, runCheck(t, master, p), "a replica attached")
	assert.Subset(t, master.HGetAll(ctx, StateKey).Val(), inService)
	assert.Equal(t, info(t, master, "replication", "master_replid"), master.HGet(ctx, StateKey, "r").Val(), "the new ID is recorded")

	// The replica leaves and the backlog is freed a second later: a new ID
	// again.
	id = info(t, master, "replication", "master_replid")
	require.NoError(t, master.ConfigSet(ctx, "repl-backlog-ttl", "1").Err())
	require.NoError(t, other.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
	require.Eventually(t, func() bool { return info(t, master, "replication", "master_replid") != id }, 10*time.Second, 50*time.Millisecond)
	assert.Equal(t, CheckReply{Kind: Same, ID: first.ID}, runCheck(t, master, p), "the backlog freed")
	assert.Subset(t, master.HGetAll(ctx, StateKey).Val(), inService)

	// Restarted from its own snapshot: another process.
	require.NoError(t, s.RestartWithData(ctx, 0))
	restarted := runCheck(t, master, p)
	assert.Equal(t, Changed, restarted.Kind, "a restart from a file")
	assert.NotEqual(t, first.ID, restarted.ID)
	assert.NotContains(t, master.HGetAll(ctx, StateKey).Val(), "f")
}

// runCheck runs the connection check on c's server and decodes its reply.
func runCheck(t *testing.T, c *redis.Client, p *Protocol) CheckReply {
	t.Helper()
	v, err := p.Run(t.Context(), c, p.Check(StateKey))
	require.NoError(t, err)
	r, err := DecodeCheck(v)
	require.NoError(t, err)
	return r
}

// info returns the field name of the INFO section of c's server.
func info(t *testing.T, c *redis.Client, section, name string) string {
	t.Helper()
	text, err := c.Info(t.Context(), section).Result()
	require.NoError(t, err)
	for line := range strings.Lines(text) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	t.Fatalf("INFO %s has no %s", section, name)
	return ""
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
