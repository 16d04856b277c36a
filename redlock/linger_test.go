package redlock

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/faultproxy"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// TestSlowNodeKeepsConnections: a node whose answers come later than the
// node timeout, but within its linger, costs the rounds nothing (each is
// decided by the other two), and costs the node no new connections: each
// late answer is read on the connection that asked, and the late grant is
// released, so no key is left. Without the linger (the control), every
// call to the slow node closes its connection at the timeout, and the
// next one dials again.
func TestSlowNodeKeepsConnections(t *testing.T) {
	const (
		timeout = 40 * time.Millisecond
		delay   = 100 * time.Millisecond // answers from the slow node: past timeout, within timeout + linger
		locks   = 8
	)
	for _, linger := range []bool{true, false} {
		t.Run(fmt.Sprintf("linger=%v", linger), func(t *testing.T) {
			leakcheck.Check(t)
			s := redisproc.StartT(t, 3)
			p, err := faultproxy.NewProxy(s.Addrs[2])
			require.NoError(t, err)
			t.Cleanup(func() { _ = p.Close() })
			admin := redis.NewClient(&redis.Options{Addr: s.Addrs[2], Protocol: 2})
			t.Cleanup(func() { _ = admin.Close() })
			addrs := []string{s.Addrs[0], s.Addrs[1], p.Addr()}
			cl, err := openTuned(addrs, &Options{NodeTimeout: timeout}, func(tn *tunables) {
				require.Equal(t, lingering*timeout, tn.linger)
				if !linger {
					tn.linger = 0
				}
			})
			require.NoError(t, err)
			t.Cleanup(func() { _ = cl.Close() })
			warm, err := cl.Lock(t.Context(), "warm", 10*time.Second) // establishes the deployment and opens a connection
			require.NoError(t, err)
			require.NoError(t, warm.Unlock(t.Context()))
			settle(cl)

			before := connections(t, admin)
			p.SetLatency(0, delay)
			for range locks {
				l, err := cl.Lock(t.Context(), "k", 10*time.Second)
				require.NoError(t, err, "the other two nodes decide")
				require.NoError(t, l.Unlock(t.Context()))
				settle(cl) // the slow node's acquire and release have answered or timed out
			}
			p.SetLatency(0, 0)
			settle(cl)
			dials := connections(t, admin) - before
			t.Logf("dials %d", dials)

			_, err = admin.Get(t.Context(), "k").Result()
			assert.True(t, errors.Is(err, redis.Nil), "a late grant was left on the slow node: %v", err)
			if linger {
				assert.LessOrEqual(t, dials, int64(1), "connections opened to the slow node")
			} else {
				assert.GreaterOrEqual(t, dials, int64(locks), "the control: every call cut off at the timeout redials")
			}
		})
	}
}

// connections returns how many connections the server has accepted.
func connections(t *testing.T, admin *redis.Client) int64 {
	info, err := admin.Info(t.Context(), "stats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "total_connections_received:"); ok {
			var n int64
			_, err := fmt.Sscanf(strings.TrimSpace(rest), "%d", &n)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no total_connections_received in INFO stats")
	return 0
}
