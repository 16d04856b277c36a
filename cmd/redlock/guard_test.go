package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
	"github.com/redquorum/redquorum/redlock"
)

// backends start n nodes for a test: in-process nodes, and native
// redis-server processes.
var backends = []struct {
	name  string
	start func(t *testing.T, n int) []string
}{
	{"miniredis", startNodes},
	{"redis-server", startRedis},
}

// startRedis starts n native redis-server processes. Without redis-server
// it skips, or fails under CI=true.
func startRedis(t *testing.T, n int) []string {
	t.Helper()
	redisproc.Require(t)
	s, err := redisproc.Start(t.Context(), n)
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	return s.Addrs
}

// downAddr returns the address of a node that is not running.
func downAddr(t *testing.T) string {
	m := miniredis.RunT(t)
	a := m.Addr()
	m.Close()
	return a
}

// states returns the state hash of each node, to compare before and after.
func states(t *testing.T, nodes []redis.UniversalClient) []map[string]string {
	t.Helper()
	var out []map[string]string
	for _, n := range nodes {
		h, err := n.HGetAll(t.Context(), "p:"+protocol.StateKey).Result()
		require.NoError(t, err)
		out = append(out, h)
	}
	return out
}

// waitGuarded waits until every node has a state: a round returns at its
// quorum, and the acquires of the other nodes land after it.
func waitGuarded(t *testing.T, nodes []redis.UniversalClient) {
	t.Helper()
	waitGuards(t, nodes, func(g string) bool { return g != "" }, "every node has a state")
}

// waitGuards waits until ok holds for the guard field (g) of every node's
// state.
func waitGuards(t *testing.T, nodes []redis.UniversalClient, ok func(g string) bool, what string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, h := range states(t, nodes) {
			if !ok(h["g"]) {
				return false
			}
		}
		return true
	}, 5*time.Second, 5*time.Millisecond, what)
}

// waitReleased waits until no node holds a live lock key under prefix:
// a round or an Unlock returns once a quorum answered, and its requests to
// the other nodes may still be on their way. guard end refuses a node that
// holds one.
func waitReleased(t *testing.T, nodes []redis.UniversalClient, prefix string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			if k, _, err := liveKey(t.Context(), n, prefix); err != nil || k != "" {
				return false
			}
		}
		return true
	}, 5*time.Second, 5*time.Millisecond, "every node released the locks under %q", prefix)
}

// served starts three nodes with start and returns their addresses, a
// plain client on each and a Client that has locked and unlocked once on
// them: the nodes are established, the Client in service.
func served(t *testing.T, start func(t *testing.T, n int) []string) ([]string, []redis.UniversalClient, *redlock.Client) {
	t.Helper()
	addrs := start(t, 3)
	nodes := redlock.NewNodes(addrs...)
	t.Cleanup(func() { closeNodes(nodes) })
	c := newClient(t, addrs)
	l, err := c.TryLock(t.Context(), "warm", time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	// The rounds returned at a quorum: the last node may see them later.
	waitGuards(t, nodes, func(g string) bool { return g == "0" }, "every node is in service")
	waitReleased(t, nodes, "p:")
	return addrs, nodes, c
}

// TestGuardEnd: after every node lost its data, a Client that has served
// before is refused (ErrGuarded) until guard end --yes; the dry run changes
// nothing.
func TestGuardEnd(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			leakcheck.Check(t)
			addrs, nodes, c := served(t, b.start)
			for _, n := range nodes {
				require.NoError(t, n.FlushAll(t.Context()).Err())
			}
			_, err := c.TryLock(t.Context(), "job", time.Minute)
			require.ErrorIs(t, err, redlock.ErrGuarded, "negative control: every node guards itself")
			waitGuarded(t, nodes)
			before := states(t, nodes)
			args := []string{"guard", "end", "--nodes", strings.Join(addrs, ","), "--prefix", "p:"}

			code, out, errOut := runCLI(t, args...)
			assert.Equal(t, 1, code)
			assert.Equal(t, "redlock guard end: nothing changed: add --yes to end the restart guard on these 3 nodes\n", errOut)
			for _, a := range addrs {
				assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(a)+`\s+guarded for (59|60)s\s+would set serving$`, out)
			}
			assert.Contains(t, out, "note: 3 of 3 nodes have no fence counter, a quorum: fenced locks (Options.Fencing) fail until you run redlock guard fence")
			assert.Equal(t, before, states(t, nodes), "the dry run changes nothing")
			_, err = c.TryLock(t.Context(), "job", time.Minute)
			require.ErrorIs(t, err, redlock.ErrGuarded)

			code, out, errOut = runCLI(t, append(args, "--yes")...)
			require.Equal(t, 0, code, "%s%s", out, errOut)
			for i, a := range addrs {
				assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(a)+`\s+serving, fence unknown\s+set serving \(was guarded for (59|60)s\)$`, out)
				after := states(t, nodes)[i]
				assert.Equal(t, "0", after["g"], "g ends")
				assert.Equal(t, before[i]["id"], after["id"], "id stays")
				assert.NotContains(t, after, "f", "f stays unknown")
				assert.NotEqual(t, "?", after["r"], "the replication ID is recorded (or left to the next check)")
			}
			l, err := c.TryLock(t.Context(), "job", time.Minute)
			require.NoError(t, err, "served at once")
			require.NoError(t, l.Unlock(t.Context()))

			code, out, _ = runCLI(t, "guard", "status", "--nodes", strings.Join(addrs, ","), "--prefix", "p:")
			assert.Equal(t, 0, code)
			assert.Equal(t, 3, strings.Count(out, "serving, fence unknown\n"), out)
		})
	}
}

// TestGuardEndRefuses: a live lock key or an unreachable node makes guard
// end refuse, naming the key and the node, and change nothing anywhere;
// tombstones, lines of waiters and keys without a TTL do not count.
func TestGuardEndRefuses(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			leakcheck.Check(t)
			addrs, nodes, c := served(t, b.start)
			require.NoError(t, nodes[0].FlushAll(t.Context()).Err())
			l, err := c.TryLock(t.Context(), "held", time.Minute) // node 0 guards itself, 1 and 2 grant
			require.NoError(t, err)
			waitGuarded(t, nodes)
			before := states(t, nodes)
			all := strings.Join(addrs, ",")

			code, out, errOut := runCLI(t, "guard", "end", "--nodes", all, "--prefix", "p:", "--yes")
			assert.Equal(t, 1, code)
			assert.Contains(t, errOut, "redlock guard end: refused, nothing changed on any node: node "+addrs[1]+` holds the live lock key "p:held" (ttl `)
			assert.Contains(t, errOut, "; node "+addrs[2]+` holds the live lock key "p:held"`)
			assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(addrs[0])+`\s+guarded for (59|60)s\s+unchanged$`, out)
			assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(addrs[1])+`\s+serving\s+refused: holds the live lock key "p:held" \(ttl (59|60)s\)$`, out)
			assert.Equal(t, before, states(t, nodes))

			require.NoError(t, l.Unlock(t.Context()))
			down := downAddr(t)
			code, out, errOut = runCLI(t, "guard", "end", "--nodes", all+","+down, "--prefix", "p:", "--yes")
			assert.Equal(t, 1, code)
			assert.Contains(t, errOut, "refused, nothing changed on any node: node "+down+" is unreachable: ")
			assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(down)+`\s+error: .*\s+refused: unreachable$`, out)
			assert.Equal(t, before, states(t, nodes))

			require.NoError(t, nodes[1].Set(t.Context(), "p:gone", protocol.TombstonePrefix+"x", time.Minute).Err())
			require.NoError(t, nodes[2].Set(t.Context(), "p:kept", "no ttl", 0).Err())
			require.NoError(t, nodes[2].Set(t.Context(), "other:k", "another prefix", time.Minute).Err())
			require.NoError(t, nodes[0].ZAdd(t.Context(), "p:"+protocol.LinePrefix+"held", redis.Z{Score: 1, Member: "w"}).Err())
			require.NoError(t, nodes[0].PExpire(t.Context(), "p:"+protocol.LinePrefix+"held", time.Minute).Err()) // a line of waiters
			code, out, errOut = runCLI(t, "guard", "end", "--nodes", all, "--prefix", "p:", "--yes")
			require.Equal(t, 0, code, "%s%s", out, errOut)
			assert.Equal(t, "0", states(t, nodes)[0]["g"])
			assert.NotContains(t, out, "note:", "two of three nodes kept their fence counters")
		})
	}
}

// TestGuardEndCluster: guard end refuses a Redis Cluster node, whose guard
// is one state per hash slot.
func TestGuardEndCluster(t *testing.T) {
	leakcheck.Check(t)
	cl, plain := mixedNodes(t)
	code, out, errOut := runCLI(t, "guard", "end", "--nodes", strings.Join(append(plain, cl), ","), "--yes")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "node "+cl+" is a Redis Cluster node, whose restart guard is one state per hash slot and cannot be ended from here")
	assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(cl)+`\s+Redis Cluster node \(one state per hash slot\)\s+refused: is a Redis Cluster node`, out)
	for _, a := range plain {
		assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(a)+`\s+no state \(new or lost its data\)\s+unchanged$`, out)
	}
}

// mixedNodes starts a one-node Redis Cluster and two in-process plain
// nodes, and returns their addresses. Without redis-server it skips, or
// fails under CI=true.
func mixedNodes(t *testing.T) (cluster string, plain []string) {
	t.Helper()
	redisproc.Require(t)
	cl, err := redisproc.StartCluster(t.Context(), 1)
	require.NoError(t, err)
	t.Cleanup(cl.Stop)
	return cl.Addrs[0], startNodes(t, 2)
}

// TestGlobEscape: a prefix matches itself in SCAN's MATCH pattern.
func TestGlobEscape(t *testing.T) {
	assert.Equal(t, `lock:`, globEscape("lock:"))
	assert.Equal(t, `a\*b\?\[c\]\\d`, globEscape(`a*b?[c]\d`))
}

// TestGuardStatusServerChanged: a guard that the connection check started
// (its mark is "x") says why; guard end records the server's run_id and
// replication ID, so that no connection check starts it again.
func TestGuardStatusServerChanged(t *testing.T) {
	leakcheck.Check(t)
	addrs := startRedis(t, 1)
	n := redis.NewClient(&redis.Options{Addr: addrs[0], Protocol: 2})
	t.Cleanup(func() { _ = n.Close() })
	key := "p:" + protocol.StateKey
	now := time.Now().UnixMilli()
	require.NoError(t, n.HSet(t.Context(), key, "g", now+60000, "id", "abc", "v", "x", "p", "abc").Err())

	code, out, _ := runCLI(t, "guard", "status", "--nodes", addrs[0], "--prefix", "p:")
	assert.Equal(t, 0, code)
	assert.Regexp(t, `guarded for (59|60)s \(server changed: failover or restart\)`, out)

	code, out, errOut := runCLI(t, "guard", "end", "--nodes", addrs[0], "--prefix", "p:", "--yes")
	require.Equal(t, 0, code, "%s%s", out, errOut)
	r := n.HGet(t.Context(), key, "r").Val()
	assert.Len(t, r, 40)
	assert.Contains(t, n.Info(t.Context(), "replication").Val(), "master_replid:"+r+"\r\n")
	p := n.HGet(t.Context(), key, "p").Val()
	assert.Contains(t, n.Info(t.Context(), "server").Val(), "run_id:"+p+"\r\n")
	assert.Equal(t, "0", n.HGet(t.Context(), key, "g").Val())
	assert.False(t, n.HExists(t.Context(), key, "v").Val(), "no mark left")
}
