package redlock

import (
	"context"
	"crypto/tls"
	"net"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// TestDeriveClient: the client made from a user's client has the settings
// of NodeOptions and keeps the user's connection settings, timeouts
// included as the user gave them; the user's client is not changed.
func TestDeriveClient(t *testing.T) {
	tlsConf := &tls.Config{ServerName: "lock-a"}
	for _, tc := range []struct {
		name string
		opt  redis.Options
	}{
		{"defaults", redis.Options{Addr: "127.0.0.1:1"}},
		{"as users migrating from redsync build them", redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, ContextTimeoutEnabled: true}},
		{"credentials, DB, name, pool, TLS", redis.Options{Addr: "127.0.0.1:1", Username: "locker", Password: "pw", DB: 3,
			ClientName: "svc", PoolSize: 7, MinIdleConns: 1, TLSConfig: tlsConf, DialTimeout: 3 * time.Second}},
		{"no read timeout", redis.Options{Addr: "127.0.0.1:1", ReadTimeout: -1}},
		{"no deadlines", redis.Options{Addr: "127.0.0.1:1", ReadTimeout: -2, WriteTimeout: -2}},
		{"timeouts", redis.Options{Addr: "127.0.0.1:1", ReadTimeout: 2 * time.Second, WriteTimeout: 300 * time.Millisecond}},
		{"RESP2, retries, five dials", redis.Options{Addr: "127.0.0.1:1", Protocol: 2, MaxRetries: 5, DialerRetries: 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := tc.opt
			user := redis.NewClient(&opt)
			t.Cleanup(func() { _ = user.Close() })
			u := user.Options()
			before := settingsOf(u)
			d := deriveClient(user)
			t.Cleanup(func() { _ = d.Close() })
			o := d.Options()

			assert.Equal(t, before, settingsOf(u), "the user's client was changed")
			assert.Equal(t, 2, o.Protocol)
			assert.Zero(t, o.MaxRetries, "MaxRetries -1, as go-redis stores it")
			assert.Equal(t, 1, o.DialerRetries)
			assert.True(t, o.ContextTimeoutEnabled)
			assert.True(t, o.DisableIdentity)
			assert.Equal(t, maintnotifications.ModeDisabled, o.MaintNotificationsConfig.Mode)
			assert.Nil(t, o.ClientSideCacheConfig)

			assert.Equal(t, u.Addr, o.Addr)
			assert.Equal(t, u.Network, o.Network)
			assert.Equal(t, u.Username, o.Username)
			assert.Equal(t, u.Password, o.Password)
			assert.Equal(t, u.DB, o.DB)
			assert.Equal(t, u.ClientName, o.ClientName)
			assert.Equal(t, u.PoolSize, o.PoolSize)
			assert.Equal(t, u.MinIdleConns, o.MinIdleConns)
			assert.Same(t, u.TLSConfig, o.TLSConfig)
			assert.Equal(t, u.DialTimeout, o.DialTimeout)
			assert.Equal(t, u.ReadTimeout, o.ReadTimeout, "ReadTimeout %v given", tc.opt.ReadTimeout)
			assert.Equal(t, u.WriteTimeout, o.WriteTimeout, "WriteTimeout %v given", tc.opt.WriteTimeout)
			assert.NotSame(t, u.MaintNotificationsConfig, o.MaintNotificationsConfig)
		})
	}
}

// settingsOf returns the settings of o that the derived client changes,
// and its OnConnect and Dialer as code addresses.
func settingsOf(o *redis.Options) []any {
	return []any{o.Protocol, o.MaxRetries, o.DialerRetries, o.ContextTimeoutEnabled, o.DisableIdentity,
		o.MaintNotificationsConfig.Mode, o.ReadTimeout, o.WriteTimeout, o.PushNotificationProcessor,
		reflect.ValueOf(o.OnConnect).Pointer(), reflect.ValueOf(o.Dialer).Pointer()}
}

// TestDeriveClientDialer: the derived client dials through the user's
// Dialer, once per connection attempt.
func TestDeriveClientDialer(t *testing.T) {
	leakcheck.Check(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // refused from now on
	var dials atomic.Int32
	user := redis.NewClient(&redis.Options{Addr: addr, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}})
	t.Cleanup(func() { _ = user.Close() })
	d := deriveClient(user)
	t.Cleanup(func() { _ = d.Close() })
	require.Error(t, d.Ping(t.Context()).Err())
	assert.EqualValues(t, 1, dials.Load(), "one dial, through the user's Dialer")
}

// userNodes are node clients as a user builds them, with an OnConnect and a
// hook of the user's that count what they see.
type userNodes struct {
	clients    []redis.UniversalClient
	onConnects atomic.Int32 // calls of the user's OnConnect
	hook       *countHook
	onConnect  func(context.Context, *redis.Conn) error
}

func newUserNodes(t *testing.T, addrs []string, password string, db int) *userNodes {
	u := &userNodes{hook: &countHook{}}
	u.onConnect = func(context.Context, *redis.Conn) error { u.onConnects.Add(1); return nil }
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, Password: password, DB: db, MaxRetries: -1, ContextTimeoutEnabled: true, OnConnect: u.onConnect})
		c.AddHook(u.hook)
		t.Cleanup(func() { _ = c.Close() })
		u.clients = append(u.clients, c)
	}
	return u
}

// countHook counts the commands that pass through a client's hooks.
type countHook struct{ n atomic.Int32 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(int32(len(cmds))); return next(ctx, cmds) }
}

// TestNewDerivesNodeClients: on real servers that require a password, New
// locks in the user's DB through clients of its own, which run the user's
// OnConnect and the connection check; the user's clients are neither
// changed nor used (their hook sees nothing), and Close closes the
// Client's clients but not the user's.
func TestNewDerivesNodeClients(t *testing.T) {
	leakcheck.Check(t)
	s := redisproc.StartT(t, 3)
	const password, db = "s3cret", 2
	for _, a := range s.Addrs {
		_, err := redisproc.Do(t.Context(), a, "CONFIG", "SET", "requirepass", password)
		require.NoError(t, err)
	}
	u := newUserNodes(t, s.Addrs, password, db)
	cl, err := New(u.clients, &Options{UnsafeNoRestartGuard: true})
	require.NoError(t, err)
	require.Len(t, cl.owned, 3)

	l, err := cl.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	for i, c := range u.clients {
		assert.Equal(t, reflect.ValueOf(u.onConnect).Pointer(), reflect.ValueOf(c.(*redis.Client).Options().OnConnect).Pointer(),
			"node %d: the user's OnConnect was replaced", i)
		admin := redis.NewClient(&redis.Options{Addr: s.Addrs[i], Password: password, DB: db, Protocol: 2})
		// A round returns at its quorum; the last node's answer lands a moment later.
		assert.Eventually(t, func() bool { v, _ := protocol.Holding(admin.Get(t.Context(), "k").Val()); return v == l.Token() }, 5*time.Second, time.Millisecond,
			"node %d: the lock in the user's DB", i)
		assert.Len(t, admin.HGet(t.Context(), reservedKey, "r").Val(), 40, "node %d: the connection check ran", i)
		require.NoError(t, admin.Close())
	}
	require.NoError(t, l.Unlock(t.Context()))
	assert.Positive(t, u.onConnects.Load(), "the user's OnConnect runs on the Client's connections")
	assert.Zero(t, u.hook.n.Load(), "the user's clients were used")

	require.NoError(t, cl.Close())
	for i, c := range cl.owned {
		assert.ErrorIs(t, c.Ping(context.Background()).Err(), redis.ErrClosed, "the Client's client %d", i)
	}
	for i, c := range u.clients {
		assert.NoError(t, c.Ping(context.Background()).Err(), "the user's client %d", i)
	}
}

// TestNodeClientsAsGiven: with the option, and for Sentinel clients always,
// the lock commands go through the clients given, whose OnConnect gets the
// connection check; nothing is made or closed for them.
func TestNodeClientsAsGiven(t *testing.T) {
	c := newCluster(t, 3)
	c.establish("")
	u := newUserNodes(t, []string{c.srv[0].Addr(), c.srv[1].Addr(), c.srv[2].Addr()}, "", 0)
	cl, err := New(u.clients, &Options{NodeClientsAsGiven: true})
	require.NoError(t, err)
	assert.Empty(t, cl.owned)
	l, err := cl.TryLock(t.Context(), "k", time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	assert.Positive(t, u.hook.n.Load(), "the commands passed the user's hook")
	assert.NotEqual(t, reflect.ValueOf(u.onConnect).Pointer(), reflect.ValueOf(u.clients[0].(*redis.Client).Options().OnConnect).Pointer(),
		"the check was added to the user's OnConnect")
	require.NoError(t, cl.Close())
	assert.NoError(t, u.clients[0].Ping(t.Context()).Err())

	sentinel := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "lock-a", SentinelAddrs: []string{"127.0.0.1:1"}, Protocol: 2, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = sentinel.Close() })
	require.Nil(t, sentinel.Options().OnConnect)
	cl, err = New([]redis.UniversalClient{sentinel, c.nodes[1], c.nodes[2]}, nil)
	require.NoError(t, err)
	assert.Len(t, cl.owned, 2, "the plain clients' own")
	assert.NotNil(t, sentinel.Options().OnConnect, "the Sentinel client used as given, with the check")
	assert.Nil(t, c.nodes[1].(*redis.Client).Options().OnConnect, "a plain client left alone")
	require.NoError(t, cl.Close())
}

// TestNewNodesUsedAsGiven: New sends through the clients that NewNodes
// made as they are (they have the library's settings already), instead of
// a second pool made from the same options; other plain clients get one.
func TestNewNodesUsedAsGiven(t *testing.T) {
	c := newCluster(t, 3)
	c.establish("")
	made := NewNodes(c.srv[0].Addr(), c.srv[1].Addr())
	t.Cleanup(func() { _ = closeClients(made) })
	cl, err := New([]redis.UniversalClient{made[0], made[1], c.nodes[2]}, nil)
	require.NoError(t, err)
	require.Len(t, cl.owned, 1, "only the plain client's own")
	l, err := cl.TryLock(t.Context(), "k", time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	assert.NotNil(t, made[0].(*redis.Client).Options().OnConnect, "NewNodes' client used as given, with the check")
	require.NoError(t, cl.Close())
	assert.NoError(t, made[0].Ping(t.Context()).Err(), "Close leaves the caller's clients open")
}
