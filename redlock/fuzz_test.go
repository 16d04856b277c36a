package redlock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// FuzzTryLock feeds arbitrary keys and TTLs to TryLock: it must never panic,
// must either refuse the input with an error or return a lock, and must leave
// no held lock key on any node once the lock is released.
func FuzzTryLock(f *testing.F) {
	f.Add("stock", int64(time.Second))
	f.Add("", int64(time.Second))
	f.Add("k", int64(0))
	f.Add("k", int64(-1))
	f.Add("k", int64(time.Millisecond))
	f.Add("k", int64(3*time.Millisecond))
	f.Add("\x00\xff{tag}", int64(500*time.Microsecond))
	f.Add("k", int64(1<<62))
	s := redisproc.StartT(f, 3) // shared by the inputs: a start per input would be most of the fuzzer's time
	f.Fuzz(func(t *testing.T, key string, ttl int64) {
		c := clusterOn(t, s)
		for _, m := range c.srv {
			m.FlushAll() // the last input's tombstones and state
		}
		cl := c.client(t, &Options{KeyPrefix: "p:"})
		l, err := cl.TryLock(t.Context(), key, time.Duration(ttl))
		if err == nil {
			require.Equal(t, key, l.Key())
			require.NoError(t, l.Unlock(t.Context()))
		}
		require.NoError(t, cl.Close())
		for i, m := range c.srv {
			// Only the node's state (see ErrGuarded) stays, and tombstones
			// (free, expiring; see internal/protocol/release.lua).
			require.Contains(t, m.Keys(), "p:"+reservedKey)
			for _, k := range m.Keys() {
				if k != "p:"+reservedKey {
					require.False(t, held(m, k), "node %d keeps key %q after key=%q ttl=%v (err=%v)", i, k, key, time.Duration(ttl), err)
				}
			}
		}
	})
}
