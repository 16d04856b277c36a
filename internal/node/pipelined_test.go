package node

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/hashslot"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// sentNames records the names of the commands a client sends.
type sentNames struct {
	mu    sync.Mutex
	names []string
}

func (h *sentNames) add(cmds ...redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range cmds {
		h.names = append(h.names, c.Name())
	}
}

// take returns the names recorded since the last take, without those of
// a new connection's set-up and check (hello, client, eval).
func (h *sentNames) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var n []string
	for _, name := range h.names {
		if name != "hello" && name != "client" && name != "eval" {
			n = append(n, name)
		}
	}
	h.names = nil
	return n
}

func (h *sentNames) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *sentNames) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.add(cmd)
		return next(ctx, cmd)
	}
}
func (h *sentNames) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.add(cmds...)
		return next(ctx, cmds)
	}
}

// TestPipelinedAcquire, on a real server: an acquire on an established node
// is SET NX PX and HGET of the guard alone; each case that the two replies
// do not decide goes on to the script, which answers as it does for any
// acquire, and a node that is not established keeps nothing of it.
func TestPipelinedAcquire(t *testing.T) {
	const prefix, ttl, guard = "p:", time.Minute, time.Minute
	s := redisproc.StartT(t, 1)
	admin := redis.NewClient(&redis.Options{Addr: s.Addrs[0], Protocol: 2})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := t.Context()
	state := prefix + protocol.StateKey
	pipeline, thenScript := []string{"set", "hget"}, []string{"set", "hget", "evalsha"}
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, token string) // the node after a grant of another key
		want    protocol.AcquireKind
		sent    []string
		left    string // what k holds afterwards: "token", or "" for nothing
	}{
		{"established, key free", func(*testing.T, string) {}, protocol.Granted, pipeline, "token"},
		{"key held by another token", func(t *testing.T, _ string) {
			require.NoError(t, admin.Set(ctx, prefix+"k", "other", ttl).Err())
		}, protocol.Taken, thenScript, "other"},
		{"key keeps this token's tombstone", func(t *testing.T, token string) {
			require.NoError(t, admin.Set(ctx, prefix+"k", protocol.TombstonePrefix+token, ttl).Err())
		}, protocol.Gone, thenScript, "tombstone"},
		{"node in its restart guard", func(t *testing.T, _ string) {
			until := time.Now().Add(guard).UnixMilli()
			require.NoError(t, admin.HSet(ctx, state, "g", strconv.FormatInt(until, 10)).Err())
		}, protocol.Guarded, thenScript, ""},
		{"node lost its data (FLUSHALL)", func(t *testing.T, _ string) {
			require.NoError(t, admin.FlushAll(ctx).Err())
		}, protocol.Guarded, thenScript, ""},
		{"server restarted without its data", func(t *testing.T, _ string) {
			require.NoError(t, s.Restart(ctx, 0))
		}, protocol.Guarded, thenScript, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, admin.FlushAll(ctx).Err())
			require.NoError(t, admin.HSet(ctx, state, "g", "0").Err())
			client := redis.NewClient(&redis.Options{Addr: s.Addrs[0], MaxRetries: -1})
			t.Cleanup(func() { _ = client.Close() })
			sent := &sentNames{}
			client.AddHook(sent)
			cfg := &Config{Prefix: prefix, Protocol: protocol.New(guard, false, protocol.Kernel, prefix),
				Clock: clock.Real{}, Log: slog.New(slog.DiscardHandler), Tags: new(hashslot.Tags),
				BatchWindow: time.Second}
			n := New(client, "n", cfg)
			acquire := func(key, token string) (protocol.AcquireReply, error) {
				a := &protocol.Acquire{Keys: []string{prefix + key, state}, Token: token, TTL: ttl}
				return n.Acquire(ctx, a, nil, nil)
			}
			rep, err := acquire("warm", "warm-token") // a new node's first acquire is the script
			require.NoError(t, err)
			require.Equal(t, protocol.Granted, rep.Kind)
			sent.take()

			token := "tok-" + strconv.Itoa(int(time.Now().UnixNano()))
			tc.prepare(t, token)
			// After a restart the pool finds its idle connection closed and
			// opens another, whose check guards the new server.
			rep, err = acquire("k", token)
			require.NoError(t, err)
			assert.Equal(t, tc.want, rep.Kind)
			assert.Equal(t, tc.sent, sent.take())
			v, err := admin.Get(ctx, prefix+"k").Result()
			switch tc.left {
			case "":
				assert.ErrorIs(t, err, redis.Nil, "a guarded node keeps nothing of the round: k holds %q", v)
			case "token":
				assert.Equal(t, token, v)
			case "tombstone":
				assert.Equal(t, protocol.TombstonePrefix+token, v)
			default:
				assert.Equal(t, tc.left, v)
			}
		})
	}
}
