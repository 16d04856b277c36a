package redlock

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/protocol"
)

// cluster is N in-process Redis-protocol nodes with a fault hook in front of
// each client.
type cluster struct {
	srv   []*miniredis.Miniredis
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
		if m.Exists(prefix + reservedKey) {
			continue
		}
		m.HSet(prefix+reservedKey, "g", "0", "id", "test", "f", "0")
	}
}

func newCluster(t *testing.T, n int) *cluster {
	t.Helper()
	c := &cluster{}
	for range n {
		m := miniredis.RunT(t)
		m.ClockTTL(true) // TTLs run down in real time
		cl := redis.NewClient(NodeOptions(m.Addr()))
		h := &faultHook{}
		cl.AddHook(h)
		t.Cleanup(func() { _ = cl.Close() })
		c.srv = append(c.srv, m)
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
		// In-process nodes under the race detector on two cores answer in
		// milliseconds, not microseconds.
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

// setTime sets the time of every node (TIME and key expiry) to now.
func (c *cluster) setTime(now time.Time) {
	for _, m := range c.srv {
		m.SetTime(now)
	}
}

// restart imitates a restart of node i without persistence: it comes back
// with no data.
func (c *cluster) restart(i int) { c.srv[i].FlushAll() }

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

// value returns what m holds at key, without the mark of a key waited
// for (see internal/protocol/acquire.lua), and m.Get's error.
func value(m *miniredis.Miniredis, key string) (string, error) {
	v, err := m.Get(key)
	v, _ = protocol.Holding(v)
	return v, err
}

// held reports whether key exists on m and is not a tombstone, which a
// release leaves where the key was missing and which counts as free (see
// internal/protocol/release.lua).
func held(m *miniredis.Miniredis, key string) bool {
	v, err := value(m, key)
	return err == nil && !strings.HasPrefix(v, "redquorum:gone:")
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
