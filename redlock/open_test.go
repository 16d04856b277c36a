package redlock

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// TestOpenRefusesMalformedAddresses: Open refuses an address it cannot
// use, with an error that names it (its password hidden) and says why,
// before anything is dialled; it takes host:port and redis:// and
// rediss:// URLs.
func TestOpenRefusesMalformedAddresses(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"", `addrs[1] "": empty address`},
		{"localhost", `addrs[1] "localhost": missing port`},
		{" 127.0.0.1:6379", `addrs[1] " 127.0.0.1:6379": contains a space`},
		{"127.0.0.1:6379\n", `contains a space`},
		{"a:1,b:2,c:3", `addrs[1] "a:1,b:2,c:3": contains a comma`},
		{"http://h:6379", `addrs[1] "http://h:6379": unknown scheme "http"`},
		{"unix:///tmp/redis.sock", `unknown scheme "unix"`},
		{"h:0", `port "0" is not a number from 1 to 65535`},
		{"h:65536", `port "65536" is not a number from 1 to 65535`},
		{"h:port", `port "port" is not a number`},
		{"redis://h:70000", `addrs[1] "redis://h:70000": port "70000"`},
		{"redis://:secret@h:99999", `addrs[1] "redis://:xxxxx@h:99999": port "99999"`},
		{"redis://user:secret@:6379", `addrs[1] "redis://user:xxxxx@:6379": no host`},
		{"redis://h:6379/x", `invalid database number`},
		{"redis://h:6379?bogus=1", `unexpected option: bogus`},
		{":6379", `addrs[1] ":6379": no host`},
		{"redis:/h:6379", `addrs[1] "redis:/h:6379": too many colons`},
		{"::1:6379", `too many colons`},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			c, err := Open([]string{"127.0.0.1:6379", tc.addr, "127.0.0.1:6380"}, nil)
			if c != nil {
				_ = c.Close()
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.True(t, strings.HasPrefix(err.Error(), "redlock: addrs[1] "), err.Error())
			assert.NotContains(t, err.Error(), "secret")
			assert.NotContains(t, err.Error(), "\n")
		})
	}
	for _, ok := range []string{"127.0.0.1:6379", "lock-a:6379", "[::1]:6379", "redis://lock-a", "redis://:pw@lock-a:6379/2",
		"rediss://user:pw@lock-a:6380/0?dial_timeout=3s&pool_size=4", "redis://[::1]:6379"} {
		c, err := Open([]string{ok, "127.0.0.1:1", "127.0.0.1:2"}, nil)
		if assert.NoError(t, err, ok) {
			require.NoError(t, c.Close())
		}
	}
}

// TestNodeURL: a URL's credentials, DB, TLS and timeouts reach the node
// client, with the settings of NodeOptions on top; NewNodes marks it, and
// its client of a malformed address fails every command with the error that
// Open gives.
func TestNodeURL(t *testing.T) {
	nodes := NewNodes("rediss://locker:pw@lock-a:6380/3?max_retries=5&protocol=3&read_timeout=2s", "lock-b:6379", "a:1,b:2")
	t.Cleanup(func() { _ = closeClients(nodes) })
	o := nodes[0].(*redis.Client).Options()
	assert.Equal(t, "lock-a:6380", o.Addr)
	assert.Equal(t, "locker", o.Username)
	assert.Equal(t, "pw", o.Password)
	assert.Equal(t, 3, o.DB)
	require.NotNil(t, o.TLSConfig)
	assert.Equal(t, "lock-a", o.TLSConfig.ServerName)
	assert.False(t, o.TLSConfig.InsecureSkipVerify)
	assert.Equal(t, 2*time.Second, o.ReadTimeout)
	assert.Equal(t, time.Second, o.WriteTimeout, "NodeOptions' where the URL says nothing")
	assert.Zero(t, o.MaxRetries, "MaxRetries -1, as go-redis stores it")
	assert.Equal(t, 2, o.Protocol)
	assert.True(t, o.ContextTimeoutEnabled)
	assert.True(t, madeByNewNodes(nodes[0].(*redis.Client)), "NewNodes' dialer, which speaks TLS itself")
	assert.Nil(t, nodes[1].(*redis.Client).Options().TLSConfig)

	err := nodes[2].Ping(t.Context()).Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `redlock: addrs[2] "a:1,b:2": contains a comma`)
}

// requirePassword makes the servers ask for password.
func requirePassword(t *testing.T, addrs []string, password string) {
	t.Helper()
	for _, a := range addrs {
		_, err := redisproc.Do(t.Context(), a, "CONFIG", "SET", "requirepass", password)
		require.NoError(t, err)
	}
}

// TestOpenPassword: Open takes a password and a DB from redis:// URLs, and
// locks in that DB on servers that require the password.
func TestOpenPassword(t *testing.T) {
	s := redisproc.StartT(t, 3)
	requirePassword(t, s.Addrs, "secret")
	urls := make([]string, len(s.Addrs))
	for i, a := range s.Addrs {
		urls[i] = "redis://:secret@" + a + "/2"
	}
	c, err := Open(urls, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	l, err := c.Lock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	settle(c) // a round returns at its quorum: the last node's answer lands later
	admins := make([]*redis.Client, len(s.Addrs))
	for i, a := range s.Addrs {
		admins[i] = redis.NewClient(&redis.Options{Addr: a, Password: "secret", DB: 2, Protocol: 2})
		t.Cleanup(func() { _ = admins[i].Close() })
		assert.Equal(t, int64(1), admins[i].Exists(t.Context(), "k").Val(), "%s: the lock in DB 2", a)
	}
	require.NoError(t, l.Unlock(t.Context()))
	settle(c) // so does an unlock
	for i, a := range s.Addrs {
		assert.Zero(t, admins[i].Exists(t.Context(), "k").Val(), "%s: the lock left after Unlock", a)
	}

	wrong := make([]string, len(s.Addrs))
	for i, a := range s.Addrs {
		wrong[i] = "redis://:wrong@" + a
	}
	c, err = Open(wrong, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = c.TryLock(t.Context(), "k", time.Minute)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.Contains(t, fmt.Sprintf("%+v", err), "WRONGPASS")
}

// TestParseNode: ParseNode gives the options Open would use, named by
// host:port, and refuses what Open refuses with the address named and its
// password hidden.
func TestParseNode(t *testing.T) {
	o, err := ParseNode("rediss://locker:secret@lock-a:6380/3")
	require.NoError(t, err)
	assert.Equal(t, "lock-a:6380", o.Addr)
	assert.Equal(t, "secret", o.Password)
	assert.Equal(t, 3, o.DB)
	assert.Equal(t, "lock-a", o.TLSConfig.ServerName)
	assert.True(t, o.ContextTimeoutEnabled)
	o, err = ParseNode("lock-b:6379")
	require.NoError(t, err)
	assert.Equal(t, "lock-b:6379", o.Addr)

	for _, tc := range []struct{ addr, want string }{
		{"localhost", `redlock: address "localhost": missing port`},
		{"redis://:secret@h:99999", `redlock: address "redis://:xxxxx@h:99999": port "99999" is not a number`},
		{"a:1,b:2", `redlock: address "a:1,b:2": contains a comma`},
	} {
		o, err := ParseNode(tc.addr)
		assert.Nil(t, o, tc.addr)
		require.Error(t, err, tc.addr)
		assert.True(t, strings.HasPrefix(err.Error(), tc.want), err.Error())
		assert.NotContains(t, err.Error(), "secret")
	}
}
