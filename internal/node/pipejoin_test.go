package node

import (
	"log/slog"
	"strconv"
	"strings"
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

// TestPipelinedJoin, on a real server: a waiter's round with the handoff on
// the node, refused by a marked key that another token holds, is the MULTI
// transaction alone, and leaves the node as the script's refusal leaves it
// (the key as it was, the same entry at the same place in line). Each case
// that the transaction's reply does not decide goes on to the script, which
// answers as for any acquire and keeps no entry of a granted round in line.
func TestPipelinedJoin(t *testing.T) {
	const prefix, ttl, guard, channel = "p:", time.Minute, time.Minute, protocol.HandChannel + "c1"
	s := redisproc.StartT(t, 1)
	admin := redis.NewClient(&redis.Options{Addr: s.Addrs[0], Protocol: 2})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := t.Context()
	state := prefix + protocol.StateKey
	line := func(key string) string { return protocol.LineKey(prefix, key) }
	tx := []string{"multi", "set", "zadd", "pttl", "pexpire", "exec"}
	thenScript := append(append([]string(nil), tx...), "evalsha")
	var exp = strconv.FormatInt(time.Now().Add(ttl).UnixMilli(), 10) // a tombstone's expiry
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, token, prev string) // the node after a grant of another key
		want    protocol.AcquireKind
		sent    []string
		left    string // what k holds afterwards ("TOKEN" stands for the round's token)
		inLine  bool   // the round's entry stays in k's line
	}{
		{"marked key held by another token", func(t *testing.T, _, _ string) {
			require.NoError(t, admin.Set(ctx, prefix+"k", "w:other", ttl).Err())
		}, protocol.Taken, tx, "w:other", true},
		{"marked key held by another, with tombstones of others", func(t *testing.T, _, _ string) {
			require.NoError(t, admin.Set(ctx, prefix+"k", "w:other\n"+protocol.TombstonePrefix+"x\t"+exp, ttl).Err())
		}, protocol.Taken, tx, "w:other\n" + protocol.TombstonePrefix + "x\t" + exp, true},
		{"unmarked key held by another token", func(t *testing.T, _, _ string) {
			require.NoError(t, admin.Set(ctx, prefix+"k", "other", ttl).Err())
		}, protocol.Taken, thenScript, "w:other", true},
		{"key free", func(*testing.T, string, string) {}, protocol.Granted, thenScript, "TOKEN", false},
		{"key holds only tombstones", func(t *testing.T, _, _ string) {
			require.NoError(t, admin.Set(ctx, prefix+"k", protocol.TombstonePrefix+"x", ttl).Err())
		}, protocol.Granted, thenScript, "TOKEN\n" + protocol.TombstonePrefix + "x\t", false},
		{"key holds the waiter's previous round", func(t *testing.T, _, prev string) {
			require.NoError(t, admin.Set(ctx, prefix+"k", "w:"+prev, ttl).Err())
		}, protocol.Granted, thenScript, "w:TOKEN", false},
		{"key holds the hand value of the waiter's previous round", func(t *testing.T, _, prev string) {
			require.NoError(t, admin.Set(ctx, prefix+"k", "w:"+protocol.HandPrefix+prev, ttl).Err())
		}, protocol.Granted, thenScript, "w:TOKEN", false},
		{"key keeps this token's tombstone", func(t *testing.T, token, _ string) {
			require.NoError(t, admin.Set(ctx, prefix+"k", "w:other\n"+protocol.TombstonePrefix+token+"\t"+exp, ttl).Err())
		}, protocol.Gone, thenScript, "w:other\n" + protocol.TombstonePrefix + "TOKEN\t" + exp, true},
		{"key without expiry", func(t *testing.T, _, _ string) {
			require.NoError(t, admin.Set(ctx, prefix+"k", "w:other", 0).Err())
		}, protocol.Taken, thenScript, "w:other", true},
		{"key free, node in its restart guard", func(t *testing.T, _, _ string) {
			until := time.Now().Add(guard).UnixMilli()
			require.NoError(t, admin.HSet(ctx, state, "g", strconv.FormatInt(until, 10)).Err())
		}, protocol.Guarded, thenScript, "", true},
	} {
		for _, resp := range []int{2, 3} { // a nil in EXEC's reply reads alike in both
			t.Run(tc.name+"/RESP"+strconv.Itoa(resp), func(t *testing.T) {
				require.NoError(t, admin.FlushAll(ctx).Err())
				require.NoError(t, admin.HSet(ctx, state, "g", "0").Err())
				client := redis.NewClient(&redis.Options{Addr: s.Addrs[0], MaxRetries: -1, Protocol: resp})
				t.Cleanup(func() { _ = client.Close() })
				sent := &sentNames{}
				client.AddHook(sent)
				cfg := &Config{Prefix: prefix, Protocol: protocol.New(guard, false, protocol.Handoff, prefix).WithHandChannel(channel),
					Clock: clock.Real{}, Log: slog.New(slog.DiscardHandler), Tags: new(hashslot.Tags),
					BatchWindow: time.Second}
				n := New(client, "n", cfg)
				token := "tok-" + strconv.FormatInt(time.Now().UnixNano(), 10)
				prev := "prev-" + token
				join := protocol.Join{Place: "place-" + token, Ticket: 1234, Entries: protocol.Cleared, Channel: channel, Prev: prev}
				acquire := func(key string, j protocol.Join) (protocol.AcquireReply, error) {
					a := &protocol.Acquire{Keys: []string{prefix + key, state}, Token: token, TTL: ttl, Join: j}
					return n.Acquire(ctx, a, nil, nil)
				}
				_, err := acquire("warm", protocol.Join{}) // a new node's first acquire is the script
				require.NoError(t, err)
				require.NoError(t, admin.Del(ctx, prefix+"warm").Err())
				sent.take()

				tc.prepare(t, token, prev)
				rep, err := acquire("k", join)
				require.NoError(t, err)
				assert.Equal(t, tc.want, rep.Kind)
				assert.Equal(t, tc.sent, sent.take())
				v, err := admin.Get(ctx, prefix+"k").Result()
				if tc.left == "" {
					assert.ErrorIs(t, err, redis.Nil, "a guarded node keeps nothing of the round: k holds %q", v)
				} else if left := strings.ReplaceAll(tc.left, "TOKEN", token); strings.HasSuffix(left, "\t") {
					assert.True(t, strings.HasPrefix(v, left), "k holds %q", v) // and the tombstone's expiry
				} else {
					assert.Equal(t, left, v)
				}
				entries, err := admin.ZRangeWithScores(ctx, line("k"), 0, -1).Result()
				require.NoError(t, err)
				if !tc.inLine {
					assert.Empty(t, entries, "a granted round leaves no entry in line")
					return
				}
				if tc.want != protocol.Taken || rep.Wait < 0 {
					// Where the script would not have joined (a key without
					// expiry, this round's tombstone, a guarded node), the
					// transaction's entry stays: a hint, as any entry.
					assert.Equal(t, []redis.Z{{Score: 1234, Member: join.Place + "|" + token + "|60000|" + channel}}, entries)
					if tc.name == "key without expiry" {
						assert.Less(t, rep.Wait, time.Duration(0))
					}
					return
				}
				assert.InDelta(t, ttl, rep.Wait, float64(time.Second))
				// The script's refusal of the same round on a twin key.
				require.NoError(t, admin.Copy(ctx, prefix+"k", prefix+"twin", 0, true).Err())
				if tc.name == "unmarked key held by another token" {
					require.NoError(t, admin.Set(ctx, prefix+"twin", "other", ttl).Err())
				}
				b := protocol.Acquire{Keys: []string{prefix + "twin", state}, Token: token, TTL: ttl, Join: join}
				_, err = cfg.Protocol.Run(ctx, &n.proc, cfg.Protocol.AcquireCmd(b))
				require.NoError(t, err)
				twin, err := admin.ZRangeWithScores(ctx, line("twin"), 0, -1).Result()
				require.NoError(t, err)
				assert.Equal(t, twin, entries, "the same entries as the script's")
				left, err := admin.PTTL(ctx, line("k")).Result()
				require.NoError(t, err)
				assert.Greater(t, left, ttl, "the line outlives the round's TTL")
				assert.LessOrEqual(t, left, 2*ttl)
			})
		}
	}
}

// TestPipelinedJoinNotSent: the rounds that the pipelined join does not
// decide alike go as the script alone.
func TestPipelinedJoinNotSent(t *testing.T) {
	const prefix, ttl, channel = "p:", time.Minute, protocol.HandChannel + "c1"
	state := prefix + protocol.StateKey
	handoff := protocol.New(time.Minute, false, protocol.Handoff, prefix).WithHandChannel(channel)
	join := protocol.Join{Place: "place", Ticket: 1, Entries: protocol.Cleared, Channel: channel}
	a := func(edit func(a *protocol.Acquire)) *protocol.Acquire {
		a := &protocol.Acquire{Keys: []string{prefix + "k", state}, Token: "tok", TTL: ttl, Join: join}
		edit(a)
		return a
	}
	assert.True(t, handoff.PipelinedJoin(a(func(*protocol.Acquire) {})))
	for name, edit := range map[string]func(a *protocol.Acquire){
		"no join":             func(a *protocol.Acquire) { a.Join = protocol.Join{} },
		"entries may be left": func(a *protocol.Acquire) { a.Join.Entries = protocol.MayHave },
		"only named":          func(a *protocol.Acquire) { a.Join.Channel = "" },
		"two keys":            func(a *protocol.Acquire) { a.Keys = []string{prefix + "k", prefix + "l", state} },
		"a hand value":        func(a *protocol.Acquire) { a.Token = protocol.HandPrefix + "tok" },
		"a handover":          func(a *protocol.Acquire) { a.Handover = "old" },
		"a shortcut":          func(a *protocol.Acquire) { a.Shortcut = protocol.Shortcut{ID: "id"} },
		"a semaphore":         func(a *protocol.Acquire) { a.Layer.Role = protocol.Slot },
		"a key of another prefix": func(a *protocol.Acquire) {
			a.Keys[0] = "q:k"
		},
	} {
		assert.False(t, handoff.PipelinedJoin(a(edit)), name)
	}
	for name, p := range map[string]*protocol.Protocol{
		"in line":  protocol.New(time.Minute, false, protocol.InLine, prefix),
		"backoff":  protocol.New(time.Minute, false, protocol.Announce, prefix),
		"fenced":   protocol.New(time.Minute, true, protocol.Handoff, prefix).WithHandChannel(channel),
		"no guard": protocol.New(0, false, protocol.Handoff, prefix).WithHandChannel(channel),
	} {
		assert.Equal(t, name == "no guard", p.PipelinedJoin(a(func(*protocol.Acquire) {})), name)
	}
}

// TestPipelinedJoinRefused, on a real server: a user whose ACL lacks MULTI
// gets the script's answer, the same as without the transaction (its
// commands ran one by one, the EXEC refused), and the node sends its later
// waiters' rounds as the script alone.
func TestPipelinedJoinRefused(t *testing.T) {
	const prefix, ttl, channel = "p:", time.Minute, protocol.HandChannel + "c1"
	s := redisproc.StartT(t, 1)
	admin := redis.NewClient(&redis.Options{Addr: s.Addrs[0], Protocol: 2})
	t.Cleanup(func() { _ = admin.Close() })
	ctx := t.Context()
	state := prefix + protocol.StateKey
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "locker", "on", ">pw", "~*", "&*", "+@all", "-multi").Err())
	require.NoError(t, admin.HSet(ctx, state, "g", "0").Err())
	client := redis.NewClient(&redis.Options{Addr: s.Addrs[0], Username: "locker", Password: "pw", MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	sent := &sentNames{}
	client.AddHook(sent)
	cfg := &Config{Prefix: prefix, Protocol: protocol.New(time.Minute, false, protocol.Handoff, prefix).WithHandChannel(channel),
		Clock: clock.Real{}, Log: slog.New(slog.DiscardHandler), Tags: new(hashslot.Tags), BatchWindow: time.Second}
	n := New(client, "n", cfg)
	_, err := n.Acquire(ctx, &protocol.Acquire{Keys: []string{prefix + "warm", state}, Token: "warm", TTL: ttl}, nil, nil)
	require.NoError(t, err)
	sent.take()

	for i, want := range [][]string{
		{"multi", "set", "zadd", "pttl", "pexpire", "exec", "evalsha"}, // refused, then the script
		{"evalsha"}, // the script alone from then on
	} {
		for _, key := range []string{"held", "free"} {
			require.NoError(t, admin.Del(ctx, prefix+key, protocol.LineKey(prefix, key)).Err())
		}
		require.NoError(t, admin.Set(ctx, prefix+"held", "w:other", ttl).Err())
		for _, key := range []string{"free", "held"} { // the refused transaction's SET runs alone, and sets the free key
			token := "tok-" + strconv.Itoa(i) + key
			j := protocol.Join{Place: token, Ticket: 1, Entries: protocol.Cleared, Channel: channel}
			rep, err := n.Acquire(ctx, &protocol.Acquire{Keys: []string{prefix + key, state}, Token: token, TTL: ttl, Join: j}, nil, nil)
			require.NoError(t, err)
			if key == "held" {
				assert.Equal(t, protocol.Taken, rep.Kind)
				assert.Equal(t, []redis.Z{{Score: 1, Member: token + "|" + token + "|60000|" + channel}},
					admin.ZRangeWithScores(ctx, protocol.LineKey(prefix, key), 0, -1).Val(), "in line once")
				assert.Equal(t, []string{"evalsha"}, sent.take(), "round %d: the node sends no more transactions", i)
			} else {
				assert.Equal(t, protocol.Granted, rep.Kind)
				assert.Equal(t, token, admin.Get(ctx, prefix+key).Val())
				assert.Empty(t, admin.ZRange(ctx, protocol.LineKey(prefix, key), 0, -1).Val(), "a granted round leaves no entry")
				assert.Equal(t, want, sent.take(), "round %d", i)
			}
		}
	}
}
