package redlock

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
)

// acquires records the acquires a node client sends: the scripts' ARGV,
// and the pipelined acquire's SET NX as nil (see protocol.Pipelined).
type acquires struct {
	mu   sync.Mutex
	argv [][]any // each acquire's ARGV; nil for a pipelined one
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
	a := cmd.Args()
	if a[0] == "set" && len(a) > 3 && a[3] == "nx" {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.argv = append(h.argv, nil)
		return
	}
	if !isScript(scripts.Acquire)(cmd) {
		return
	}
	keys, _ := strconv.Atoi(fmt.Sprint(a[2]))
	h.mu.Lock()
	defer h.mu.Unlock()
	h.argv = append(h.argv, a[3+keys:])
}

func (h *acquires) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.argv = nil
}

func (h *acquires) sent() [][]any {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([][]any(nil), h.argv...)
}

// TestDirectRound: a Lock that nobody else of its Client contends for makes
// its first round as TryLock does, before it has a waiter: the pipelined
// acquire (SET, HGET and PTTL, no script), with no ticket, and the Client
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
			for _, cl := range []*Client{a, b} {
				// A Client's first acquire on a node is the script (see
				// node.Node.pipelines); later ones are pipelined.
				l, err := cl.Lock(t.Context(), "warm", time.Minute)
				require.NoError(t, err)
				require.NoError(t, l.Unlock(t.Context()))
				settle(cl) // node 0's answer, which the round may not have waited for, has come
			}
			sent.reset()

			la, err := a.Lock(t.Context(), "k", time.Minute)
			require.NoError(t, err)
			settle(a) // the round returned at its quorum: node 0's acquire may come later
			require.Len(t, sent.sent(), 1)
			assert.Nil(t, sent.sent()[0], "the pipelined acquire, not the script: %v", sent.sent()[0])
			assert.Zero(t, a.waker().Connections(), "no pub/sub connection for a lock that never waited")

			began := time.Now()
			lc, ec := lockLater(b, "k", time.Minute)
			require.Eventually(t, func() bool { return len(sent.sent()) >= 4 }, 5*time.Second, time.Millisecond, "b's direct round (pipelined, then the script) and its waiter's first")
			require.NoError(t, la.Unlock(t.Context()))
			lb := <-lc
			require.NoError(t, <-ec)
			require.NoError(t, lb.Unlock(t.Context()))

			argv := sent.sent()
			// b's direct round, with no ticket (the pipelined acquire, then,
			// refused, the script; or, where the round was decided first,
			// nothing); then its waiter's rounds.
			argv = argv[1:]
			joined := slices.IndexFunc(argv, func(a []any) bool { return len(a) > 3 })
			if w == WaitBackoff {
				assert.Equal(t, -1, joined, "the backoff's rounds join no line: %v", argv)
				return
			}
			require.Positive(t, joined, "b's direct round, then its waiter's first round, which joins the line: %v", argv)
			argv = argv[joined:]
			ticket, err := strconv.ParseInt(fmt.Sprint(argv[0][3]), 10, 64)
			require.NoError(t, err, "the ticket: %v", argv[0])
			assert.InDelta(t, began.UnixMilli()/ticketStep*ticketStep, ticket, 2*ticketStep,
				"the ticket is the time b's Lock began, before its direct round")
		})
	}
}
