package redlock

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
)

// acquires records the arguments of the acquires a node client sends.
type acquires struct {
	mu   sync.Mutex
	argv [][]any // each acquire's ARGV
}

func (h *acquires) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *acquires) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add(cmd)
		return next(ctx, cmd)
	}
}
func (h *acquires) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			h.add(cmd)
		}
		return next(ctx, cmds)
	}
}

func (h *acquires) add(cmd redis.Cmder) {
	if !isScript(scripts.Acquire)(cmd) {
		return
	}
	a := cmd.Args()
	keys, _ := strconv.Atoi(fmt.Sprint(a[2]))
	h.mu.Lock()
	defer h.mu.Unlock()
	h.argv = append(h.argv, a[3+keys:])
}

func (h *acquires) sent() [][]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([][]any(nil), h.argv...)
}

// TestDirectRound: a Lock that nobody else of its Client contends for makes
// its first round as TryLock does, before it has a waiter: its acquire
// carries the token, the TTL and the guard, with no ticket, and the Client
// opens no pub/sub connection. A refused one then waits, and its waiter's
// first round joins the line with the ticket of the Lock's start (Unix ms,
// by steps of ticketStep), which orders it before waiters that came later.
func TestDirectRound(t *testing.T) {
	for _, w := range []Waiting{WaitHandoff, WaitInLine, WaitBackoff} {
		t.Run(w.String(), func(t *testing.T) {
			leakcheck.Check(t)
			c := newCluster(t, 3)
			c.waiting = w
			sent := &acquires{}
			c.nodes[0].AddHook(sent)
			a, b := c.client(t, nil), c.client(t, nil)

			la, err := a.Lock(t.Context(), "k", time.Minute)
			require.NoError(t, err)
			require.Len(t, sent.sent(), 1)
			assert.Len(t, sent.sent()[0], 3, "token, ttl and guard: %v", sent.sent()[0])
			assert.Zero(t, a.waker().Connections(), "no pub/sub connection for a lock that never waited")

			began := time.Now()
			lc, ec := lockLater(b, "k", time.Minute)
			require.Eventually(t, func() bool { return len(sent.sent()) >= 3 }, 5*time.Second, time.Millisecond, "b's direct round and its waiter's first")
			require.NoError(t, la.Unlock(t.Context()))
			lb := <-lc
			require.NoError(t, <-ec)
			require.NoError(t, lb.Unlock(t.Context()))

			argv := sent.sent()
			assert.Len(t, argv[1], 3, "b's direct round carries no ticket: %v", argv[1])
			if w == WaitBackoff {
				assert.Len(t, argv[2], 3, "the backoff's rounds join no line: %v", argv[2])
				return
			}
			require.GreaterOrEqual(t, len(argv[2]), 4, "b's waiter's first round joins the line: %v", argv[2])
			ticket, err := strconv.ParseInt(fmt.Sprint(argv[2][3]), 10, 64)
			require.NoError(t, err, "the ticket: %v", argv[2])
			assert.InDelta(t, began.UnixMilli()/ticketStep*ticketStep, ticket, 2*ticketStep,
				"the ticket is the time b's Lock began, before its direct round")
		})
	}
}
