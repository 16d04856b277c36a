package main

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/redlock"
)

// fencedLock locks and unlocks key with c and returns the lock's fence.
func fencedLock(t *testing.T, c *redlock.Client, key string) uint64 {
	t.Helper()
	l, err := c.Lock(t.Context(), key, time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	return l.Fence()
}

// TestGuardFence: after three of five nodes lost their data and their
// guard was ended, fenced locks fail at once, naming the cause and the
// repair; guard fence shows what it would do, then raises every node's
// counter above every fence issued before, only ever upwards, and fenced
// locks work again with greater fences.
func TestGuardFence(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			leakcheck.Check(t)
			addrs := b.start(t, 5)
			nodes := redlock.NewNodes(addrs...)
			t.Cleanup(func() { closeNodes(nodes) })
			c, err := redlock.New(redlock.NewNodes(addrs...), &redlock.Options{KeyPrefix: "p:", NodeTimeout: time.Second, Fencing: true, MaxWait: 5 * time.Second})
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			var highest uint64
			for i := range 3 {
				highest = max(highest, fencedLock(t, c, "job"+strconv.Itoa(i)))
			}
			for _, n := range nodes[:3] {
				require.NoError(t, n.FlushAll(t.Context()).Err())
			}
			_, err = c.TryLock(t.Context(), "job", time.Minute)
			require.ErrorIs(t, err, redlock.ErrGuarded, "the nodes that lost their data guard themselves")
			waitGuarded(t, nodes[:3])
			waitReleased(t, nodes, "p:") // the refused round's release
			all := strings.Join(addrs, ",")
			code, out, errOut := runCLI(t, "guard", "end", "--nodes", all, "--prefix", "p:", "--yes")
			require.Equal(t, 0, code, "%s%s", out, errOut)
			assert.Contains(t, out, "note: 3 of 5 nodes have no fence counter, a quorum: fenced locks (Options.Fencing) fail until you run redlock guard fence")

			_, err = c.Lock(t.Context(), "job", time.Minute)
			require.ErrorIs(t, err, redlock.ErrFenceUnknown)
			assert.Regexp(t, `^redlock: lock "job": not obtained \(\d of 5 nodes, 3 needed\): fence counter unknown on 3 nodes \(they lost their data\); run "redlock guard fence" to repair$`, err.Error())
			assert.NotContains(t, err.Error(), "gave up", "Lock ends at once, not after MaxWait")

			before := states(t, nodes)
			args := []string{"guard", "fence", "--nodes", all, "--prefix", "p:"}
			start := uint64(time.Now().UnixMicro())
			code, out, errOut = runCLI(t, args...)
			assert.Equal(t, 1, code)
			assert.Regexp(t, `^redlock guard fence: nothing changed: add --yes to raise the fence counter on these 5 nodes to \d+\n$`, errOut)
			for i, a := range addrs {
				fence := "unknown"
				if i >= 3 {
					fence = `\d+` // below the highest fence when the node missed its write-back
				}
				assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(a)+`\s+`+fence+`\s+would raise to \d+$`, out)
			}
			assert.Equal(t, before, states(t, nodes), "the dry run changes nothing")

			code, out, errOut = runCLI(t, append(args, "--yes")...)
			require.Equal(t, 0, code, "%s%s", out, errOut)
			target := states(t, nodes)[0]["f"]
			set, err := strconv.ParseUint(target, 10, 64)
			require.NoError(t, err)
			assert.Greater(t, set, highest, "above every fence issued")
			assert.Greater(t, set, start, "at least the time in microseconds")
			for i, a := range addrs {
				assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(a)+`\s+\S+\s+raised to `+target+`$`, out)
				assert.Equal(t, target, states(t, nodes)[i]["f"])
			}
			fence := fencedLock(t, c, "job")
			assert.Greater(t, fence, set, "every fence after the repair exceeds every fence before")

			const resource = 5_000_000_000_000_000 // the highest fence a resource accepted
			code, out, errOut = runCLI(t, append(args, "--yes", "--at-least", strconv.Itoa(resource))...)
			require.Equal(t, 0, code, "%s%s", out, errOut)
			assert.Equal(t, 5, strings.Count(out, "raised to 5000000000000001\n"), out)
			assert.Equal(t, uint64(resource+2), fencedLock(t, c, "job"))
			// The counters are raised, never lowered (a fenced lock may raise
			// one between guard fence's read and its write).
			was := states(t, nodes)[0]["f"]
			did, err := raiseOn(t.Context(), nodes[0], "p:"+protocol.StateKey, 7)
			require.NoError(t, err)
			assert.Equal(t, "kept "+was+" (higher)", did)
			assert.Equal(t, was, states(t, nodes)[0]["f"])
		})
	}
}

// TestGuardFenceRefuses: guard fence changes nothing when a node is
// unreachable, and refuses a fence the nodes cannot count exactly.
func TestGuardFenceRefuses(t *testing.T) {
	leakcheck.Check(t)
	addrs := startNodes(t, 2)
	nodes := redlock.NewNodes(addrs...)
	t.Cleanup(func() { closeNodes(nodes) })
	down := downAddr(t)
	code, out, errOut := runCLI(t, "guard", "fence", "--nodes", strings.Join(append(addrs, down), ","), "--yes")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "redlock guard fence: refused, nothing changed on any node: node "+down+" is unreachable: ")
	assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(addrs[0])+`\s+unknown\s+unchanged$`, out)
	for _, n := range nodes {
		assert.Zero(t, n.Exists(t.Context(), "redquorum:node").Val(), "nothing written")
	}
	code, _, errOut = runCLI(t, "guard", "fence", "--nodes", addrs[0], "--at-least", "9007199254740992")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--at-least 9007199254740992 is not below 2^53")
}

// TestGuardFenceCluster: guard fence raises the plain masters' counters and
// leaves a Redis Cluster node, whose counters are per hash slot, alone.
func TestGuardFenceCluster(t *testing.T) {
	leakcheck.Check(t)
	cl, plain := mixedNodes(t)
	code, out, errOut := runCLI(t, "guard", "fence", "--nodes", strings.Join(append(plain, cl), ","), "--yes")
	require.Equal(t, 0, code, "%s%s", out, errOut)
	assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(cl)+`\s+Redis Cluster node \(one state per hash slot\)\s+left alone: the next fenced locks set its counters, one per hash slot$`, out)
	for _, a := range plain {
		assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(a)+`\s+unknown\s+raised to \d+$`, out)
	}
}
