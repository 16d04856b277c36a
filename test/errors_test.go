package test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/faultproxy"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/redlock"
)

// withOptions returns a Client on addrs whose node i's client options are
// changed by set, closed with its node clients at the end of the test.
func withOptions(t *testing.T, addrs []string, opts *redlock.Options, set func(i int, o *redis.Options)) *redlock.Client {
	t.Helper()
	var nodes []redis.UniversalClient
	for i, a := range addrs {
		o := redlock.NodeOptions(a)
		set(i, o)
		n := redis.NewClient(o)
		t.Cleanup(func() { _ = n.Close() })
		nodes = append(nodes, n)
	}
	c, err := redlock.New(nodes, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestDeadlineKeepsCause: when the caller's context ends Lock's wait, the
// line names the cause of the last rounds before the context's error, and
// errors.Is finds both.
func TestDeadlineKeepsCause(t *testing.T) {
	leakcheck.Check(t)
	addrs, direct := five(t)
	holder := open(t, addrs, nil)
	c := open(t, addrs, nil)
	ctx := t.Context()
	l, err := holder.Lock(ctx, "busy", time.Minute)
	require.NoError(t, err)
	waitHeldEverywhere(t, direct, "busy", l.Token())

	dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = c.Lock(dctx, "busy", time.Second)
	assert.Regexp(t, `^redlock: lock "busy": not obtained \(0 of 5 nodes, 3 needed\): held by another owner on [345] nodes; context deadline exceeded$`, err.Error())
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, redlock.ErrTaken)

	cctx, cancelNow := context.WithCancel(ctx)
	time.AfterFunc(50*time.Millisecond, cancelNow)
	_, err = c.Lock(cctx, "busy", time.Second)
	assert.Regexp(t, `: held by another owner on [345] nodes; context canceled$`, err.Error())
	assert.ErrorIs(t, err, context.Canceled)

	// The restart guard, with a deadline.
	warm, err := c.Lock(ctx, "warm", time.Second)
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(ctx))
	for _, d := range direct[:3] {
		require.NoError(t, d.FlushAll(ctx).Err())
	}
	gctx, cancelGuard := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelGuard()
	_, err = c.Lock(gctx, "job", time.Second)
	assert.Regexp(t, `^redlock: lock "job": not obtained \(\d of 5 nodes, 3 needed\): restart guard on 3 nodes, \S+ left; context deadline exceeded$`, err.Error())
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, redlock.ErrGuarded)
}

// TestDeadlineDuringRound: a deadline that expires during a round, before
// the nodes that the network holds up answer, still names what the nodes
// told, in that round or the one before.
func TestDeadlineDuringRound(t *testing.T) {
	leakcheck.Check(t)
	addrs, direct := five(t)
	var proxied []string
	var proxies []*faultproxy.Proxy
	for _, a := range addrs {
		p, err := faultproxy.NewProxy(a)
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		proxies, proxied = append(proxies, p), append(proxied, p.Addr())
	}
	holder := open(t, addrs, nil)
	l, err := holder.Lock(t.Context(), "busy", time.Minute)
	require.NoError(t, err)
	waitHeldEverywhere(t, direct, "busy", l.Token())
	c := open(t, proxied, &redlock.Options{NodeTimeout: 5 * time.Second, MinRetryDelay: time.Millisecond, MaxRetryDelay: time.Millisecond})
	t.Cleanup(func() {
		for _, p := range proxies {
			p.Heal() // before the Client closes
		}
	})

	ctx, cancel := context.WithTimeout(t.Context(), 600*time.Millisecond)
	defer cancel()
	time.AfterFunc(200*time.Millisecond, func() {
		for _, p := range proxies {
			p.Partition()
		}
	})
	_, err = c.Lock(ctx, "busy", time.Second)
	require.Error(t, err)
	assert.Regexp(t, `^redlock: lock "busy": not obtained \(0 of 5 nodes, 3 needed\): held by another owner on [1-5] nodes?; context deadline exceeded$`, err.Error())
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, err, redlock.ErrTaken)
}

// TestUnfixableEndsLock: a wrong password, a missing permission, a lock key
// of another type and a host name that does not exist end Lock at once
// when they leave fewer than a quorum of nodes, naming the cause; on fewer
// nodes they are failures like others, and the lock is obtained.
func TestUnfixableEndsLock(t *testing.T) {
	leakcheck.Check(t)
	addrs, direct := five(t)
	ctx := t.Context()
	for _, d := range direct {
		require.NoError(t, d.ConfigSet(ctx, "requirepass", "secret").Err())
		d.Options().Password = "secret"
		require.NoError(t, d.Do(ctx, "ACL", "SETUSER", "reader", "on", ">pw", "~*", "+get").Err())
	}
	opts := &redlock.Options{MaxWait: 5 * time.Second}
	oneLine := func(key, cause string) string {
		return `^redlock: lock "` + key + `": not obtained \(\d of 5 nodes, 3 needed\): 3 nodes failed with an error no retry fixes, such as: ` + cause
	}

	wrong := func(n int, set func(o *redis.Options)) *redlock.Client {
		return withOptions(t, addrs, opts, func(i int, o *redis.Options) {
			o.Password = "secret"
			if i < n {
				set(o)
			}
		})
	}
	c := wrong(0, nil)
	warm, err := c.Lock(ctx, "warm", time.Second) // a new deployment: established at once
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(ctx))

	password := func(o *redis.Options) { o.Password = "wrong" }
	_, err = wrong(3, password).Lock(ctx, "k", time.Second)
	require.Error(t, err)
	assert.Regexp(t, oneLine("k", "WRONGPASS "), err.Error())
	assert.NotContains(t, err.Error(), "gave up", "Lock ends at once, not after MaxWait")
	assert.True(t, redis.IsAuthError(err), "errors.As finds the redis error")
	assert.ErrorIs(t, err, redlock.ErrNotObtained)

	l, err := wrong(1, password).Lock(ctx, "k", time.Second)
	require.NoError(t, err, "a wrong password on one node of five is a node failure")
	require.NoError(t, l.Unlock(ctx))

	_, err = wrong(3, func(o *redis.Options) { o.Password = "" }).Lock(ctx, "k", time.Second)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "3 nodes failed with an error no retry fixes, such as: NOAUTH")

	_, err = wrong(3, func(o *redis.Options) { o.Username, o.Password = "reader", "pw" }).Lock(ctx, "k", time.Second)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "3 nodes failed with an error no retry fixes, such as: NOPERM")
	assert.True(t, redis.IsPermissionError(err))

	for _, d := range direct[:3] {
		require.NoError(t, d.HSet(ctx, "typed", "a", "b").Err())
	}
	_, err = c.Lock(ctx, "typed", time.Second)
	require.Error(t, err)
	assert.Regexp(t, oneLine("typed", "WRONGTYPE "), err.Error())
	assert.NotContains(t, err.Error(), "gave up")
	require.NoError(t, direct[2].Del(ctx, "typed").Err())
	l, err = c.Lock(ctx, "typed", time.Second)
	require.NoError(t, err, "a lock key of another type on two nodes of five is a node failure")
	require.NoError(t, l.Unlock(ctx))
}

// TestUnknownHostEndsLock: a majority of host names that do not exist (a
// mistyped address) end Lock at once, naming the DNS error. The names are
// looked up through a DNS server of the test's own that answers NXDOMAIN,
// so that the test does not depend on the machine's resolver.
func TestUnknownHostEndsLock(t *testing.T) {
	leakcheck.Check(t)
	addrs, _ := five(t)
	resolver := nxdomainResolver(t)
	var nodes []redis.UniversalClient
	for _, a := range append([]string{"redis-a.invalid:6379", "redis-b.invalid:6379", "redis-c.invalid:6379"}, addrs[:2]...) {
		d := &net.Dialer{Timeout: time.Second, Resolver: resolver}
		n := redis.NewClient(&redis.Options{Addr: a, Dialer: d.DialContext})
		t.Cleanup(func() { _ = n.Close() })
		nodes = append(nodes, n)
	}
	c, err := redlock.New(nodes, &redlock.Options{MaxWait: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	_, err = c.Lock(t.Context(), "k", time.Second)
	require.Error(t, err)
	assert.Regexp(t, `^redlock: lock "k": not obtained \(0 of 5 nodes, 3 needed\): 3 nodes failed with an error no retry fixes, such as: dial tcp: lookup redis-[abc]\.invalid.*no such host`, err.Error())
	assert.NotContains(t, err.Error(), "gave up", "Lock ends at once, not after MaxWait")
	var dns *net.DNSError
	require.ErrorAs(t, err, &dns)
	assert.True(t, dns.IsNotFound)
}

// nxdomainResolver returns a resolver whose every query goes to a DNS
// server on 127.0.0.1 that answers that the name does not exist.
func nxdomainResolver(t *testing.T) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = pc.Close() })
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if n < 12 {
				continue
			}
			// The query's header and question, as a response: QR, the
			// query's opcode and RD, RA, and RCODE 3 (NXDOMAIN); no
			// answer, authority or additional records.
			resp := append([]byte(nil), buf[:n]...)
			resp[2] = 0x80 | resp[2]&0x79
			resp[3] = 0x83
			clear(resp[6:12])
			_, _ = pc.WriteTo(resp, from)
		}
	}()
	server := pc.LocalAddr().String()
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", server)
	}}
}
