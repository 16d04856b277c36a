package node

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// testWindow is the batch window of the tests' batchers.
const testWindow = 5 * time.Millisecond

// options returns go-redis options for a node at addr as a lock client
// needs them: no retries, context deadlines on the socket.
func options(addr string) *redis.Options {
	return &redis.Options{Addr: addr, Protocol: 2, MaxRetries: -1, ContextTimeoutEnabled: true, DisableIdentity: true}
}

// pipeCounter counts the single commands and the pipelines sent to a node,
// and can hold single commands at a gate.
type pipeCounter struct {
	singles, pipes atomic.Int64 // of INCR commands
	sizes          chan int
	gate           chan struct{}
}

func (h *pipeCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *pipeCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() != "incr" {
			return next(ctx, cmd) // connection set-up
		}
		h.singles.Add(1)
		if h.gate != nil {
			<-h.gate
		}
		return next(ctx, cmd)
	}
}

func (h *pipeCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipes.Add(1)
		h.sizes <- len(cmds)
		return next(ctx, cmds)
	}
}

// newNode starts a redis-server and returns a client of it with options;
// both end with the test.
func newNode(t *testing.T) *redis.Client {
	t.Helper()
	s := redisproc.StartT(t, 1)
	n := redis.NewClient(options(s.Addrs[0]))
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// gatedNode returns a batcher with the given window on a client of a new
// node whose INCR commands wait at the hook's gate until it is closed.
func gatedNode(t *testing.T, window time.Duration) (*pipeCounter, *batchedClient) {
	t.Helper()
	n := newNode(t)
	h := &pipeCounter{sizes: make(chan int, 10), gate: make(chan struct{})}
	n.AddHook(h)
	return h, &batchedClient{b: &batcher{window: window}, client: n}
}

// TestBatcher: commands that arrive while one is in flight wait, and go
// out together as one pipeline, in arrival order, each with its own result;
// a command alone goes out alone.
func TestBatcher(t *testing.T) {
	leakcheck.Check(t)
	h, bn := gatedNode(t, time.Hour) // the first command is held at a gate while the others queue
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	require.NoError(t, bn.client.Set(ctx, "text", "not a number", 0).Err()) // not held: a SET
	first := redis.NewIntCmd(ctx, "incr", "n")
	done := make(chan error, 1)
	go func() { done <- bn.Process(ctx, first) }() // held at the gate: in flight
	require.Eventually(t, func() bool { return h.singles.Load() == 1 }, 5*time.Second, time.Millisecond)

	const queued = 5
	cmds := make([]*redis.IntCmd, queued)
	var wg sync.WaitGroup
	for i := range queued {
		key := "n"
		if i == 2 {
			key = "text" // fails alone
		}
		cmds[i] = redis.NewIntCmd(ctx, "incr", key)
		wg.Go(func() { _ = bn.Process(ctx, cmds[i]) })
		require.Eventually(t, func() bool { // in this order
			bn.b.mu.Lock()
			defer bn.b.mu.Unlock()
			return len(bn.b.pending) == i+1
		}, 5*time.Second, time.Millisecond)
	}
	close(h.gate)
	require.NoError(t, <-done)
	wg.Wait()
	assert.Equal(t, int64(1), first.Val())
	assert.Equal(t, int64(1), h.singles.Load(), "single commands")
	assert.Equal(t, int64(1), h.pipes.Load(), "pipelines")
	assert.Equal(t, queued, <-h.sizes)
	want := []int64{2, 3, 0, 4, 5}
	for i, c := range cmds {
		if i == 2 {
			assert.Error(t, c.Err(), "incr on text")
			continue
		}
		assert.NoError(t, c.Err(), "command %d", i)
		assert.Equal(t, want[i], c.Val(), "command %d", i)
	}

	// Alone again: sent alone.
	c := redis.NewIntCmd(ctx, "incr", "n")
	require.NoError(t, bn.Process(ctx, c))
	assert.Equal(t, int64(6), c.Val())
	assert.Equal(t, int64(2), h.singles.Load())
	assert.Equal(t, int64(1), h.pipes.Load())
}

// TestBatchDeadline: a batch runs until the latest deadline of its
// commands, so that a command that waited long behind a slow one is not
// cut short together with the whole batch by an earlier deadline.
func TestBatchDeadline(t *testing.T) {
	b := &batcher{window: testWindow}
	early, cancel1 := context.WithTimeout(context.Background(), time.Second)
	defer cancel1()
	late, cancel2 := context.WithTimeout(context.Background(), time.Hour)
	defer cancel2()
	n := newNode(t)
	var seen time.Time
	n.AddHook(deadlineSpy{&seen})
	c1, c2 := redis.NewCmd(early, "ping"), redis.NewCmd(late, "ping")
	b.run(n, []*batchReq{{ctx: early, cmds: []redis.Cmder{c1}, wake: make(chan struct{}, 1)}, {ctx: late, cmds: []redis.Cmder{c2}, wake: make(chan struct{}, 1)}})
	require.NoError(t, c1.Err())
	require.NoError(t, c2.Err())
	d, _ := late.Deadline()
	assert.Equal(t, d, seen)
}

type deadlineSpy struct{ seen *time.Time }

func (deadlineSpy) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (deadlineSpy) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (s deadlineSpy) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		*s.seen, _ = ctx.Deadline()
		return next(ctx, cmds)
	}
}

// TestBatchSkipsEndedContexts: a command whose context ended while it
// waited for its batch is not sent and fails with the context's error.
func TestBatchSkipsEndedContexts(t *testing.T) {
	n := newNode(t)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	live := context.Background()
	c1, c2, c3 := redis.NewIntCmd(live, "incr", "n"), redis.NewIntCmd(ended, "incr", "n"), redis.NewIntCmd(live, "incr", "n")
	b := &batcher{window: testWindow}
	b.run(n, []*batchReq{
		{ctx: live, cmds: []redis.Cmder{c1}, wake: make(chan struct{}, 1)},
		{ctx: ended, cmds: []redis.Cmder{c2}, wake: make(chan struct{}, 1)},
		{ctx: live, cmds: []redis.Cmder{c3}, wake: make(chan struct{}, 1)},
	})
	assert.Equal(t, int64(1), c1.Val())
	assert.ErrorIs(t, c2.Err(), context.Canceled)
	assert.Equal(t, int64(2), c3.Val())
	assert.Equal(t, "2", n.Get(t.Context(), "n").Val(), "the ended command was sent")
}

// TestBatchBypassesSlowNode: behind a command in flight for longer than
// batchWindow (a slow or failing node), later commands do not queue: they go
// out on their own at once.
func TestBatchBypassesSlowNode(t *testing.T) {
	leakcheck.Check(t)
	h, bn := gatedNode(t, testWindow)
	ctx := t.Context()
	stalled := make(chan error, 1)
	go func() { stalled <- bn.Process(ctx, redis.NewIntCmd(ctx, "incr", "n")) }() // held at the gate
	require.Eventually(t, func() bool { return h.singles.Load() == 1 }, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { // in flight for longer than the window
		bn.b.mu.Lock()
		defer bn.b.mu.Unlock()
		return time.Since(bn.b.since) > bn.b.window
	}, 5*time.Second, time.Millisecond)

	done := make(chan error, 1)
	go func() { done <- bn.Process(ctx, redis.NewStatusCmd(ctx, "set", "other", "v")) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("a command queued behind a command in flight for longer than the batch window")
	}
	select {
	case <-stalled:
		t.Fatal("the stalled command returned")
	default:
	}
	close(h.gate)
	require.NoError(t, <-stalled)
	assert.Zero(t, h.pipes.Load())
}
