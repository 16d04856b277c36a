package node

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher sends one node's lock commands, acquires and releases, one batch at
// a time. A command that finds the node idle is sent at once, alone. Commands
// that arrive while a batch is in flight wait for it, and the first of them
// then sends them as one pipeline: one write from us, one read and one write
// on the node. Under load this saves most system calls and wake-ups on both
// sides, most of a round's cost; a command alone pays a mutex. Commands to one
// node are sent in the order in which they were queued.
//
// Commands queue only behind a batch sent less than Config.BatchWindow ago.
// Behind a slow or failing node (a stalled socket, a dial that go-redis
// retries) they go out on their own, concurrently, as without batching. So one
// bad node does not hold up the rounds that still wait for its vote.
type batcher struct {
	// window is Config.BatchWindow, measured on the system's monotonic clock,
	// not the client's configured one. It times socket I/O, and a test's fake
	// clock must not freeze it: a frozen window would queue commands behind a
	// stalled node.
	window time.Duration
	reqs   sync.Pool // of *batchReq

	mu      sync.Mutex
	busy    bool        // a command or a batch is in flight
	since   time.Time   // when it was sent
	pending []*batchReq // waiting for it, in arrival order
	spare   []*batchReq // the last batch's slice, for the next pending

	// Used by one batch at a time.
	pipe redis.Pipeliner
	ctx  deadlineCtx
}

// batchReq is a request waiting for the batch in flight: one command, or
// several that go out in order on one connection (see doAll).
type batchReq struct {
	ctx   context.Context
	cmds  []redis.Cmder
	one   [1]redis.Cmder // cmds' array for a single command
	wake  chan struct{}  // receives when the command has run, or when it is to lead the next batch
	batch []*batchReq    // set when this request leads the next batch
	skip  bool           // not sent: its context had ended
}

// batchedClient is a node client whose Process goes through its batcher.
type batchedClient struct {
	b      *batcher
	client redis.UniversalClient
}

func (c *batchedClient) Process(ctx context.Context, cmd redis.Cmder) error {
	return c.b.do(ctx, c.client, cmd)
}

// do runs cmd on node, alone or in a batch, and returns its error.
func (b *batcher) do(ctx context.Context, node redis.UniversalClient, cmd redis.Cmder) error {
	b.send(ctx, node, cmd, nil)
	return cmd.Err()
}

// doAll runs cmds on node in order on one connection, alone or in a batch;
// each command carries its own error. Nothing else is sent between them,
// though the server may run other clients' commands between two of them.
func (b *batcher) doAll(ctx context.Context, node redis.UniversalClient, cmds []redis.Cmder) {
	b.send(ctx, node, nil, cmds)
}

// send is do (cmd) and doAll (cmds, when cmd is nil).
func (b *batcher) send(ctx context.Context, node redis.UniversalClient, cmd redis.Cmder, cmds []redis.Cmder) {
	now := time.Now()
	b.mu.Lock()
	if !b.busy {
		b.busy, b.since = true, now
		b.mu.Unlock()
		if cmd != nil {
			_ = node.Process(ctx, cmd)
		} else {
			b.pipeline(ctx, node, cmds)
		}
		b.next(nil)
		return
	}
	if now.Sub(b.since) > b.window {
		// The node is slow or failing (a dial that retries, a stalled
		// socket): do not queue behind it, go out on a connection of its own.
		b.mu.Unlock()
		if cmd != nil {
			_ = node.Process(ctx, cmd)
		} else {
			_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, c := range cmds {
					_ = p.Process(ctx, c)
				}
				return nil
			})
		}
		return
	}
	r, _ := b.reqs.Get().(*batchReq)
	if r == nil {
		r = &batchReq{wake: make(chan struct{}, 1)}
	}
	r.ctx, r.cmds = ctx, cmds
	if cmd != nil {
		r.one[0] = cmd
		r.cmds = r.one[:]
	}
	b.pending = append(b.pending, r)
	b.mu.Unlock()
	<-r.wake
	if batch := r.batch; batch != nil {
		b.run(node, batch)
		b.next(batch)
	}
	*r = batchReq{wake: r.wake}
	b.reqs.Put(r)
}

// next hands the waiting commands, as a batch, to the first of them, or
// marks the node idle. done is the batch that has just run, if any: its
// slice is reused.
func (b *batcher) next(done []*batchReq) {
	b.mu.Lock()
	if done != nil {
		clear(done)
		b.spare = done[:0]
	}
	if len(b.pending) == 0 {
		b.busy = false
		b.mu.Unlock()
		return
	}
	batch := b.pending
	b.pending, b.spare = b.spare, nil
	b.since = time.Now()
	leader := batch[0]
	leader.batch = batch
	b.mu.Unlock()
	leader.wake <- struct{}{}
}

// run sends batch, as one pipeline unless it has one command. It then wakes
// its commands but the first, which is the caller's.
//
// A command whose context ended while it waited is not sent: it fails with
// the context's error. So an acquire whose round has timed out is never sent,
// rather than sent late.
func (b *batcher) run(node redis.UniversalClient, batch []*batchReq) {
	b.ctx = deadlineCtx{}
	live := 0
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			for _, c := range r.cmds {
				c.SetErr(err)
			}
			r.skip = true
			continue
		}
		live++
		if d, ok := r.ctx.Deadline(); ok && d.After(b.ctx.deadline) {
			b.ctx.deadline = d
		}
	}
	switch {
	case live == 0:
	case len(batch) == 1 && len(batch[0].cmds) == 1:
		_ = node.Process(batch[0].ctx, batch[0].cmds[0])
	case len(batch) == 1:
		b.pipeline(batch[0].ctx, node, batch[0].cmds)
	default:
		b.pipelineBatch(node, batch)
	}
	for _, r := range batch[1:] {
		r.wake <- struct{}{}
	}
}

// pipelineBatch sends the commands of batch whose context has not ended as
// one pipeline, bounded by the latest of their deadlines. A command may have
// waited for the batch ahead of it, so its own deadline may pass before its
// batch is sent. A pipeline cut short by the earliest deadline would fail all
// the others, and close their connection. The rounds decide on their own
// timeouts regardless.
func (b *batcher) pipelineBatch(node redis.UniversalClient, batch []*batchReq) {
	var ctx context.Context = context.Background()
	if !b.ctx.deadline.IsZero() {
		ctx = &b.ctx
	}
	p := b.pipeliner(node)
	for _, r := range batch {
		if !r.skip {
			for _, c := range r.cmds {
				_ = p.Process(ctx, c)
			}
		}
	}
	_, _ = p.Exec(ctx) // each command carries its own error
}

// pipeline sends cmds as one pipeline in ctx; the caller holds the batch.
func (b *batcher) pipeline(ctx context.Context, node redis.UniversalClient, cmds []redis.Cmder) {
	p := b.pipeliner(node)
	_ = p.BatchProcess(ctx, cmds...)
	_, _ = p.Exec(ctx) // each command carries its own error
}

// pipeliner returns the batcher's pipeline, made on first use; only the
// caller that holds the batch uses it.
func (b *batcher) pipeliner(node redis.UniversalClient) redis.Pipeliner {
	if b.pipe == nil {
		b.pipe = node.Pipeline()
	}
	return b.pipe
}

// deadlineCtx is a context with a deadline and nothing else. It has no
// cancellation, so no timer and no allocation. go-redis, with
// ContextTimeoutEnabled, turns the deadline into socket deadlines. Its Err
// reads the system clock, not the configured one. A context's deadline is a
// wall-clock time by definition, and the sockets apply it so.
type deadlineCtx struct {
	deadline time.Time
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *deadlineCtx) Done() <-chan struct{}       { return nil }
func (c *deadlineCtx) Value(any) any               { return nil }
func (c *deadlineCtx) Err() error {
	if !time.Now().Before(c.deadline) {
		return context.DeadlineExceeded
	}
	return nil
}
