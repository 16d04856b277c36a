package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
	"github.com/redquorum/redquorum/redlock"
)

// TestGuardStatusWait: guard status --wait exits 0 at once when every node
// serves, and 1 after --timeout naming a guarded node, or with --fencing a
// node without a fence counter; --timeout and --fencing need --wait.
func TestGuardStatusWait(t *testing.T) {
	code, _, errOut := runCLI(t, "guard", "status", "--nodes", "127.0.0.1:1", "--timeout", "1s")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--timeout and --fencing go with --wait")
	code, _, errOut = runCLI(t, "guard", "status", "--nodes", "127.0.0.1:1", "--wait", "--timeout", "0s")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--timeout must be positive")

	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			leakcheck.Check(t)
			addrs, nodes, c := served(t, b.start)
			all := strings.Join(addrs, ",")
			code, out, errOut := runCLI(t, "guard", "status", "--nodes", all, "--prefix", "p:", "--wait", "--timeout", "5s")
			require.Equal(t, 0, code, "%s%s", out, errOut)
			assert.Equal(t, 3, strings.Count(out, "serving\n"), out)
			assert.NotContains(t, out, "waiting:")

			require.NoError(t, nodes[1].FlushAll(t.Context()).Err())
			code, out, errOut = runCLI(t, "guard", "status", "--nodes", all, "--prefix", "p:", "--wait", "--timeout", "300ms")
			assert.Equal(t, 1, code)
			assert.Contains(t, out, "waiting: node "+addrs[1]+" has no state (new or lost its data): its guard starts at the next lock request\n")
			assert.Equal(t, "redlock guard status: not every node is in service after 300ms: node "+addrs[1]+" has no state (new or lost its data): its guard starts at the next lock request\n", errOut)

			l, err := c.TryLock(t.Context(), "job", time.Second) // node 1 starts its guard
			require.NoError(t, err)
			require.NoError(t, l.Unlock(t.Context()))
			waitGuarded(t, nodes)
			waitReleased(t, nodes, "p:")
			code, _, errOut = runCLI(t, "guard", "status", "--nodes", all, "--prefix", "p:", "--wait", "--timeout", "300ms")
			assert.Equal(t, 1, code)
			assert.Regexp(t, `not every node is in service after 300ms: node `+regexp.QuoteMeta(addrs[1])+` is guarded for (59|60)s\n$`, errOut)

			code, out, errOut = runCLI(t, "guard", "end", "--nodes", all, "--prefix", "p:", "--yes")
			require.Equal(t, 0, code, "%s%s", out, errOut)
			code, out, errOut = runCLI(t, "guard", "status", "--nodes", all, "--prefix", "p:", "--wait", "--timeout", "5s")
			require.Equal(t, 0, code, "%s%s", out, errOut)
			code, _, errOut = runCLI(t, "guard", "status", "--nodes", all, "--prefix", "p:", "--wait", "--fencing", "--timeout", "300ms")
			assert.Equal(t, 1, code)
			assert.Contains(t, errOut, "node "+addrs[1]+" serves without a fence counter: the next fenced lock it grants sets it\n")
		})
	}
}

// TestRollingRestartWithWait follows docs/OPERATING.md, "Restarting
// nodes", on five redis-server processes with an append-only file: while a
// Client takes locks without pause, each node in turn is restarted with
// its data (so its guard runs, its server being another), and the next one
// only once waitInService, the function of guard status --wait, returns.
// No lock is refused for want of a quorum. The control restarts three
// nodes at once without waiting: locks are then refused.
func TestRollingRestartWithWait(t *testing.T) {
	leakcheck.Check(t)
	redisproc.Require(t)
	const guard = 2 * time.Second
	run := func(t *testing.T, wait bool) (refused, guarded int64, first error) {
		s, err := redisproc.StartWith(t.Context(), 5, "--appendonly", "yes")
		require.NoError(t, err)
		t.Cleanup(s.Stop)
		nodes := redlock.NewNodes(s.Addrs...)
		t.Cleanup(func() { closeNodes(nodes) })
		c, err := redlock.New(nodes, &redlock.Options{KeyPrefix: "p:", NodeTimeout: 500 * time.Millisecond, RestartGuard: guard})
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		l, err := c.Lock(t.Context(), "warm", time.Second) // a new deployment: established at once
		require.NoError(t, err)
		require.NoError(t, l.Unlock(t.Context()))

		ctx, stop := context.WithCancel(t.Context())
		var mu sync.Mutex
		var n, bad, inGuard atomic.Int64
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					l, err := c.TryLock(ctx, fmt.Sprintf("job-%d-%d", w, i), time.Second)
					switch {
					case err == nil:
						_ = l.Unlock(context.Background())
						n.Add(1)
					case ctx.Err() != nil:
					default:
						if errors.Is(err, redlock.ErrGuarded) {
							inGuard.Add(1)
						}
						if bad.Add(1) == 1 {
							mu.Lock()
							first = err
							mu.Unlock()
						}
					}
					time.Sleep(5 * time.Millisecond)
				}
			})
		}
		look := redlock.NewNodes(s.Addrs...)
		t.Cleanup(func() { closeNodes(look) })
		for i := range s.Addrs {
			require.NoError(t, s.RestartWithData(t.Context(), i))
			if !wait {
				if i == 2 {
					break
				}
				continue
			}
			// The restarted server is guarded once a lock client has
			// checked it: waitInService sees it out of service until then.
			require.NoError(t, waitInService(t.Context(), look, s.Addrs, "p:"+protocol.StateKey, false, 20*guard, 50*time.Millisecond, io.Discard), "node %d", i)
		}
		if !wait {
			time.Sleep(guard / 2)
		}
		stop()
		wg.Wait()
		assert.Positive(t, n.Load(), "locks taken")
		mu.Lock()
		defer mu.Unlock()
		return bad.Load(), inGuard.Load(), first
	}
	t.Run("one at a time", func(t *testing.T) {
		refused, _, first := run(t, true)
		assert.Zero(t, refused, "locks refused during the rolling restart, the first: %v", first)
	})
	t.Run("negative control: three at once", func(t *testing.T) {
		refused, guarded, first := run(t, false)
		t.Logf("%d locks refused, %d of them by guarded nodes; the first: %v", refused, guarded, first)
		assert.Positive(t, guarded, "three restarted nodes, guarded, leave no quorum")
	})
}
