package redlock

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/faultproxy"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// TestSameServerTwice: a server given twice under two names, to Open or to
// New, is found by the first lock's connections; from then on every lock
// fails at once with ErrSameServer naming both, and leaves no key.
func TestSameServerTwice(t *testing.T) {
	s := redisproc.StartT(t, 2)
	_, port, err := net.SplitHostPort(s.Addrs[0])
	require.NoError(t, err)
	addrs := []string{"localhost:" + port, s.Addrs[0], s.Addrs[1]}
	open := func(t *testing.T) *Client {
		c, err := Open(addrs, nil)
		require.NoError(t, err)
		return c
	}
	given := func(t *testing.T) *Client {
		nodes := make([]redis.UniversalClient, len(addrs))
		for i, a := range addrs {
			nodes[i] = redis.NewClient(&redis.Options{Addr: a})
			t.Cleanup(func() { _ = nodes[i].Close() })
		}
		c, err := New(nodes, nil)
		require.NoError(t, err)
		return c
	}
	for name, make := range map[string]func(*testing.T) *Client{"Open": open, "New": given} {
		t.Run(name, func(t *testing.T) {
			c := make(t)
			t.Cleanup(func() { _ = c.Close() })
			err := sameServerSoon(t, c)
			assert.Contains(t, err.Error(), `redlock: lock "k": nodes[0] localhost:`+port+" and nodes[1] "+s.Addrs[0]+" are one server")
			_, err = c.Lock(t.Context(), "k", time.Minute)
			require.ErrorIs(t, err, ErrSameServer, "Lock ends at once, not after MaxWait")
			assert.False(t, errors.Is(err, ErrNotObtained))
			for _, a := range s.Addrs {
				admin := redis.NewClient(&redis.Options{Addr: a, Protocol: 2})
				t.Cleanup(func() { _ = admin.Close() })
				// A failed round's release may leave a tombstone, which holds nothing.
				assert.Eventually(t, func() bool {
					v, err := admin.Get(t.Context(), "k").Result()
					return errors.Is(err, redis.Nil) || err == nil && strings.HasPrefix(v, protocol.TombstonePrefix)
				}, 5*time.Second, time.Millisecond, "%s: the key held", a)
			}
		})
	}
}

// TestSameServerFoundByNewConnection: a name of a server that is cut off
// at the first lock is found to be another node's server by its first
// connection once it is reachable: that connection is refused, so the
// server never votes twice, and from then on every lock fails with
// ErrSameServer.
func TestSameServerFoundByNewConnection(t *testing.T) {
	s := redisproc.StartT(t, 2)
	p, err := faultproxy.NewProxy(s.Addrs[0])
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	p.Partition()
	c, err := Open([]string{s.Addrs[0], p.Addr(), s.Addrs[1]}, &Options{UnsafeNoRestartGuard: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	l, err := c.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err, "two servers of three names answer")
	require.NoError(t, l.Unlock(t.Context()))

	p.Heal()
	sameServerSoon(t, c)
	_, err = c.TryLock(t.Context(), "k", time.Minute)
	require.ErrorIs(t, err, ErrSameServer)
	assert.Contains(t, err.Error(), "nodes[0] "+s.Addrs[0]+" and nodes[1] "+p.Addr()+" are one server")
}

// sameServerSoon locks and unlocks through c until a lock fails with
// ErrSameServer, which it returns. The connections of a round find two
// nodes of one server, but the round may be decided before: from one vote
// of each server, since the second connection is refused.
func sameServerSoon(t *testing.T, c *Client) error {
	t.Helper()
	var err error
	require.Eventually(t, func() bool {
		var l *Lock
		if l, err = c.TryLock(t.Context(), "k", time.Minute); err == nil {
			assert.NoError(t, l.Unlock(t.Context()))
		}
		return errors.Is(err, ErrSameServer)
	}, 10*time.Second, 5*time.Millisecond)
	return err
}
