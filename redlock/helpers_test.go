package redlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// cmdCounter is a node client's hook that counts the commands sent, alone
// or in a pipeline, that match.
type cmdCounter struct {
	match func(redis.Cmder) bool
	n     atomic.Int64
}

func (h *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.match(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if h.match(cmd) {
				h.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// sleepWatch is the real clock, which tells when the code under test first
// sleeps for d. A test waits for that, not for some time, before it acts on
// code that must be asleep by then.
type sleepWatch struct {
	clock.Real
	d      time.Duration
	once   sync.Once
	asleep chan struct{}
}

func watchSleep(d time.Duration) *sleepWatch {
	return &sleepWatch{d: d, asleep: make(chan struct{})}
}

func (s *sleepWatch) After(d time.Duration) <-chan time.Time {
	if d == s.d {
		s.once.Do(func() { close(s.asleep) })
	}
	return s.Real.After(d)
}

// wait returns once the code under test sleeps for d.
func (s *sleepWatch) wait(t *testing.T, what string) {
	t.Helper()
	select {
	case <-s.asleep:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s never slept for %v", what, s.d)
	}
}

// cluster is N redis-server processes with a fault hook in front of each
// client.
type cluster struct {
	srv   []*server
	nodes []redis.UniversalClient
	hooks []*faultHook
	fresh bool // client does not establish the nodes' state: they start as a new deployment
	// tune, when set, changes the tunables of the clients made by client.
	tune func(*tunables)
	// waiting, when set, is the Options.Waiting of the clients made by
	// client.
	waiting Waiting
}

// establish gives every running node that has no state yet the state of a
// node in service (out of its restart guard, fence counter 0), as if the
// deployment had been bootstrapped long ago.
func (c *cluster) establish(prefix string) {
	for _, m := range c.srv {
		if m.down || m.Exists(prefix+reservedKey) {
			continue
		}
		m.HSet(prefix+reservedKey, "g", "0", "id", "test", "f", "0")
	}
}

// newCluster starts n redis-server processes, stopped when t ends, and
// returns them as a cluster (see clusterOn). It skips t when redis-server
// is not installed, as [redisproc.Require] does.
func newCluster(t *testing.T, n int) *cluster {
	t.Helper()
	return clusterOn(t, redisproc.StartT(t, n))
}

// clusterOn returns a cluster of the running servers s, whose clients are
// closed when t ends; the servers are the caller's.
func clusterOn(t *testing.T, s *redisproc.Servers) *cluster {
	t.Helper()
	c := &cluster{}
	for i, addr := range s.Addrs {
		cl := redis.NewClient(NodeOptions(addr))
		h := &faultHook{}
		cl.AddHook(h)
		t.Cleanup(func() { _ = cl.Close() })
		c.srv = append(c.srv, newServer(t, s, i))
		c.nodes = append(c.nodes, cl)
		c.hooks = append(c.hooks, h)
	}
	return c
}

// client returns a Client on the cluster's nodes, closed at the end of the
// test. Unless the cluster is fresh, it first gives every node the state of
// a node in service (see establish).
func (c *cluster) client(t *testing.T, opts *Options) *Client {
	t.Helper()
	if opts == nil {
		opts = &Options{}
	}
	if !c.fresh {
		c.establish(opts.KeyPrefix)
	}
	if opts.NodeTimeout == 0 {
		// Under the race detector on two loaded cores, a round's
		// goroutines can wait for the CPU for tens of milliseconds.
		opts.NodeTimeout = 2 * time.Second
	}
	opts.NodeClientsAsGiven = true // through the fault hooks
	if opts.Waiting == WaitDefault {
		opts.Waiting = c.waiting
	}
	cl, err := newTuned(c.nodes, opts, c.tune)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// hookedClient returns a Client on the cluster's nodes through node
// clients of its own that run hook (and not the cluster's fault hooks),
// closed at the end of the test, with the cluster's tunables.
func (c *cluster) hookedClient(t *testing.T, hook redis.Hook, opts *Options) *Client {
	t.Helper()
	var nodes []redis.UniversalClient
	for _, m := range c.srv {
		n := redis.NewClient(NodeOptions(m.Addr()))
		n.AddHook(hook)
		t.Cleanup(func() { _ = n.Close() })
		nodes = append(nodes, n)
	}
	opts.NodeClientsAsGiven = true
	if opts.Waiting == WaitDefault {
		opts.Waiting = c.waiting
	}
	cl, err := newTuned(nodes, opts, c.tune)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	return cl
}

// restart imitates a restart of node i without persistence: it comes back
// with no data. The process and its connections stay.
func (c *cluster) restart(i int) { c.srv[i].FlushAll() }

// passGuards moves the restart guard of each of the given nodes (every
// running node when none is given) d closer to its end, as if d had
// passed on the node's clock: a guarded state's end g (node time in ms,
// see internal/protocol/acquire.lua) comes d earlier. The nodes' own
// clocks cannot be moved, so this is how a test lets a guard's time pass;
// key TTLs are left alone. A node in service (g = 0) or without a state is
// not changed.
func (c *cluster) passGuards(d time.Duration, nodes ...int) {
	if len(nodes) == 0 {
		for i, m := range c.srv {
			if !m.down {
				nodes = append(nodes, i)
			}
		}
	}
	for _, i := range nodes {
		m := c.srv[i]
		g := m.HGet(reservedKey, "g")
		if g == "" || g == "0" {
			continue
		}
		end, err := strconv.ParseInt(g, 10, 64)
		if err != nil {
			m.t.Errorf("node %d: guard end %q: %v", i, g, err)
			continue
		}
		m.HSet(reservedKey, "g", strconv.FormatInt(end-d.Milliseconds(), 10))
	}
}

// holders counts the nodes whose key holds want.
func (c *cluster) holders(key, want string) int {
	n := 0
	for _, m := range c.srv {
		if v, err := value(m, key); err == nil && v == want {
			n++
		}
	}
	return n
}

// waitHolders waits until n nodes hold value at key: a round returns at its
// quorum, and the requests to the other nodes land a moment later.
func (c *cluster) waitHolders(t *testing.T, key, value string, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return c.holders(key, value) == n }, 5*time.Second, time.Millisecond,
		"%d nodes hold %s=%s", n, key, value)
}

// waitAll waits until every node holds one value at key and returns it.
func (c *cluster) waitAll(t *testing.T, key string) string {
	t.Helper()
	var v string
	require.Eventually(t, func() bool {
		v, _ = value(c.srv[0], key)
		return v != "" && c.holders(key, v) == len(c.srv)
	}, 5*time.Second, time.Millisecond, "every node holds one value at %s", key)
	return v
}

// keys counts the nodes where key exists.
func (c *cluster) keys(key string) int {
	n := 0
	for _, m := range c.srv {
		if held(m, key) {
			n++
		}
	}
	return n
}

// assertMillis checks that got, a node time in ms as the scripts write it,
// is between lo and hi.
func assertMillis(t *testing.T, got string, lo, hi time.Time, msg string) {
	t.Helper()
	ms, err := strconv.ParseInt(got, 10, 64)
	if assert.NoError(t, err, msg) {
		assert.True(t, lo.UnixMilli() <= ms && ms <= hi.UnixMilli(), "%s: %d is not in [%d, %d]", msg, ms, lo.UnixMilli(), hi.UnixMilli())
	}
}

// value returns what m holds at key, without the mark of a key waited
// for (see internal/protocol/acquire.lua), and m.Get's error.
func value(m *server, key string) (string, error) {
	v, err := m.Get(key)
	v, _ = protocol.Holding(v)
	return v, err
}

// held reports whether key exists on m and is not a tombstone, which a
// release leaves where the key was missing and which counts as free (see
// internal/protocol/release.lua).
func held(m *server, key string) bool {
	v, err := value(m, key)
	return err == nil && !strings.HasPrefix(v, "redquorum:gone:")
}

// server is one redis-server process of a cluster and a plain client to
// it, through which a test reads and changes the node's data behind the
// Client's back. Its methods fail the test when the server fails a
// command, except those that return the error.
type server struct {
	t    testing.TB
	s    *redisproc.Servers
	i    int           // the server's index in s
	rdb  *redis.Client // no fault hooks
	down bool          // killed by Close
}

// newServer returns server i of s, with a client closed when t ends.
func newServer(t testing.TB, s *redisproc.Servers, i int) *server {
	rdb := redis.NewClient(&redis.Options{
		Addr: s.Addrs[i], Protocol: 2, DisableIdentity: true, PoolSize: 4,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return &server{t: t, s: s, i: i, rdb: rdb}
}

// check fails the test when err is not nil.
func (m *server) check(err error, op string) {
	if err != nil {
		m.t.Errorf("node %s: %s: %v", m.Addr(), op, err)
	}
}

// Addr returns the server's address.
func (m *server) Addr() string { return m.s.Addrs[m.i] }

// Close kills the server (SIGKILL), as a crash would; it stays down.
func (m *server) Close() {
	m.down = true
	m.s.Kill(m.i)
}

// FlushAll deletes every key.
func (m *server) FlushAll() { m.check(m.rdb.FlushAll(context.Background()).Err(), "FLUSHALL") }

// Keys returns every key, sorted.
func (m *server) Keys() []string {
	keys, err := m.rdb.Keys(context.Background(), "*").Result()
	m.check(err, "KEYS")
	slices.Sort(keys)
	return keys
}

// Get returns the string at key; it fails with redis.Nil when key is
// missing.
func (m *server) Get(key string) (string, error) {
	return m.rdb.Get(context.Background(), key).Result()
}

// Set sets key to v, without expiry.
func (m *server) Set(key, v string) error { return m.rdb.Set(context.Background(), key, v, 0).Err() }

// Exists reports whether key exists.
func (m *server) Exists(key string) bool {
	n, err := m.rdb.Exists(context.Background(), key).Result()
	m.check(err, "EXISTS")
	return n == 1
}

// Del deletes key and reports whether it existed.
func (m *server) Del(key string) bool {
	n, err := m.rdb.Del(context.Background(), key).Result()
	m.check(err, "DEL")
	return n == 1
}

// TTL returns the time key has left, 0 when it has no expiry or is
// missing.
func (m *server) TTL(key string) time.Duration {
	d, err := m.rdb.PTTL(context.Background(), key).Result()
	m.check(err, "PTTL")
	return max(d, 0)
}

// SetTTL makes key expire in d.
func (m *server) SetTTL(key string, d time.Duration) {
	m.check(m.rdb.PExpire(context.Background(), key, d).Err(), "PEXPIRE")
}

// HGet returns field of the hash at key, "" when either is missing.
func (m *server) HGet(key, field string) string {
	v, err := m.rdb.HGet(context.Background(), key, field).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	m.check(err, "HGET")
	return v
}

// HSet sets fields of the hash at key: field, value, field, value...
func (m *server) HSet(key string, fv ...string) {
	args := make([]any, len(fv))
	for i, v := range fv {
		args[i] = v
	}
	m.check(m.rdb.HSet(context.Background(), key, args...).Err(), "HSET")
}

// HDel deletes field of the hash at key.
func (m *server) HDel(key, field string) {
	m.check(m.rdb.HDel(context.Background(), key, field).Err(), "HDEL")
}

// ZMembers returns the members of the sorted set at key, by score; it
// fails with redis.Nil when key is missing.
func (m *server) ZMembers(key string) ([]string, error) {
	members, err := m.rdb.ZRange(context.Background(), key, 0, -1).Result()
	if err == nil && len(members) == 0 {
		err = redis.Nil // a sorted set is never empty
	}
	return members, err
}

// ZScore returns the score of member in the sorted set at key.
func (m *server) ZScore(key, member string) (float64, error) {
	return m.rdb.ZScore(context.Background(), key, member).Result()
}

// ZAdd adds member with score to the sorted set at key and reports whether
// it is new.
func (m *server) ZAdd(key string, score float64, member string) (bool, error) {
	n, err := m.rdb.ZAdd(context.Background(), key, redis.Z{Score: score, Member: member}).Result()
	return n == 1, err
}

// ZRem removes member from the sorted set at key and reports whether it
// was there.
func (m *server) ZRem(key, member string) (bool, error) {
	n, err := m.rdb.ZRem(context.Background(), key, member).Result()
	return n == 1, err
}

// Publish publishes msg on channel and returns how many subscribers got it.
func (m *server) Publish(channel, msg string) int {
	n, err := m.rdb.Publish(context.Background(), channel, msg).Result()
	m.check(err, "PUBLISH")
	return int(n)
}

// PubSubNumSub returns the number of subscribers of each channel.
func (m *server) PubSubNumSub(channels ...string) map[string]int {
	subs, err := m.rdb.PubSubNumSub(context.Background(), channels...).Result()
	m.check(err, "PUBSUB NUMSUB")
	n := make(map[string]int, len(subs))
	for ch, k := range subs {
		n[ch] = int(k)
	}
	return n
}

// PubSubChannels returns the channels with a subscriber that match pattern.
func (m *server) PubSubChannels(pattern string) []string {
	chs, err := m.rdb.PubSubChannels(context.Background(), pattern).Result()
	m.check(err, "PUBSUB CHANNELS")
	return chs
}

// Time returns the server's clock (TIME), the one its scripts read.
func (m *server) Time() time.Time {
	now, err := m.rdb.Time(context.Background()).Result()
	m.check(err, "TIME")
	return now
}

// faultHook runs before each command on one node: it may block the command
// until released, fail it, or run a function (for example to move a fake
// clock). It counts the commands it saw.
type faultHook struct {
	mu     sync.Mutex
	gate   chan struct{} // when non-nil, commands wait until it is closed
	before func()
	fail   error
	only   func(redis.Cmder) bool // when non-nil, before and fail apply only to the commands it selects
	calls  atomic.Int64
	seen   []string // every command's arguments, guarded by mu
}

// commands returns the arguments of every command the hook saw, one string
// each.
func (h *faultHook) commands() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.seen)
}

// selectCmds limits before and fail to the commands that match selects.
func (h *faultHook) selectCmds(match func(redis.Cmder) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.only = match
}

func (h *faultHook) block() (release func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := make(chan struct{})
	h.gate = g
	var once sync.Once
	return func() { once.Do(func() { close(g) }) }
}

func (h *faultHook) set(before func(), fail error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.before, h.fail = before, fail
}

func (h *faultHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *faultHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := h.intercept(cmd); err != nil {
			return err
		}
		return next(ctx, cmd)
	}
}

// intercept applies the hook to one command: it counts and records it, waits
// at the gate, runs before and fails it when asked.
func (h *faultHook) intercept(cmd redis.Cmder) error {
	h.calls.Add(1)
	h.mu.Lock()
	h.seen = append(h.seen, fmt.Sprint(cmd.Args()))
	gate, before, fail, only := h.gate, h.before, h.fail, h.only
	h.mu.Unlock()
	if only != nil && !only(cmd) {
		before, fail = nil, nil
	}
	if gate != nil {
		<-gate // like a stalled network: the command is not abandoned
	}
	if before != nil {
		before()
	}
	if fail != nil {
		cmd.SetErr(fail)
		return fail
	}
	return nil
}

// ProcessPipelineHook applies the hook to each command of a pipeline (the
// Client batches concurrent commands to a node); the commands it fails are
// not sent.
func (h *faultHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return interceptPipeline(next, h.intercept)
}

// interceptPipeline is a pipeline hook that applies intercept to each
// command and sends only the commands it lets through.
func interceptPipeline(next redis.ProcessPipelineHook, intercept func(redis.Cmder) error) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		send := make([]redis.Cmder, 0, len(cmds))
		for _, cmd := range cmds {
			if intercept(cmd) == nil {
				send = append(send, cmd)
			}
		}
		if len(send) == 0 {
			return nil
		}
		return next(ctx, send)
	}
}

// logBuffer returns a logger that writes into a buffer, safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
