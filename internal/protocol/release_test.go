package protocol

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReleaseWaited runs release.lua on a real server: the unlock of a key
// that no acquire was refused by deletes it and does nothing else (its
// line is left alone and nothing is announced), while the unlock of a key
// marked as waited for names the next in line, announces the release, or
// hands the key off, marked again.
func TestReleaseWaited(t *testing.T) {
	ctx := t.Context()
	node := oneNode(t, true)
	p := New(time.Minute, false, Handoff, "")
	line := LinePrefix + "k"
	sub := node.Subscribe(ctx, ReleasedChannel+"k", HandChannel+"w")
	t.Cleanup(func() { _ = sub.Close() })
	_, err := sub.Receive(ctx) // the first subscription's confirmation
	require.NoError(t, err)
	_, err = sub.Receive(ctx)
	require.NoError(t, err)
	messages := sub.Channel()
	// heard returns the message published within a short wait, or nil.
	heard := func() *redis.Message {
		select {
		case m := <-messages:
			return m
		case <-time.After(200 * time.Millisecond):
			return nil
		}
	}
	release := func(value string, entries ...redis.Z) int64 {
		t.Helper()
		require.NoError(t, node.Del(ctx, "k", line).Err())
		require.NoError(t, node.Set(ctx, "k", value, time.Minute).Err())
		if len(entries) > 0 {
			require.NoError(t, node.ZAdd(ctx, line, entries...).Err())
		}
		n, err := p.RunInt(ctx, node, p.Release(Release{Keys: []string{"k"}, Token: "tok", TTL: time.Minute, Announce: true}))
		require.NoError(t, err)
		return n
	}
	named := redis.Z{Score: 1, Member: "id-n"}

	t.Run("not waited for", func(t *testing.T) {
		require.EqualValues(t, 1, release("tok", named))
		assert.EqualValues(t, 0, node.Exists(ctx, "k").Val(), "the key is deleted")
		assert.Equal(t, []string{"id-n"}, node.ZRange(ctx, line, 0, -1).Val(), "the line is left alone")
		assert.Nil(t, heard(), "nothing is announced")
	})
	t.Run("waited for", func(t *testing.T) {
		require.EqualValues(t, 1, release(WaitedPrefix+"tok", named))
		assert.EqualValues(t, 0, node.Exists(ctx, "k").Val(), "the key is deleted")
		assert.Empty(t, node.ZRange(ctx, line, 0, -1).Val(), "the next in line leaves the line")
		m := heard()
		require.NotNil(t, m, "the release is announced")
		assert.Equal(t, ReleasedChannel+"k", m.Channel)
		assert.Equal(t, "id-n", m.Payload, "naming the next in line")
	})
	t.Run("waited for, the next in line joined for a handoff", func(t *testing.T) {
		// The entry: the waiter's id, its round's token (the same length),
		// the TTL in ms, its client's hand channel (subscribed above).
		entry := redis.Z{Score: 1, Member: "i|r|30000|" + HandChannel + "w"}
		require.EqualValues(t, 1, release(WaitedPrefix+"tok", entry))
		assert.Equal(t, WaitedPrefix+HandPrefix+"r", node.Get(ctx, "k").Val(), "handed off, marked")
		assert.InDelta(t, 30*time.Second, node.PTTL(ctx, "k").Val(), float64(time.Second), "for the waiter's TTL")
		m := heard()
		require.NotNil(t, m, "the handoff is told to the waiter's client")
		assert.Equal(t, HandChannel+"w", m.Channel)
		assert.Equal(t, "3:"+HandPrefix+"rk", m.Payload, "the hand value unmarked, then the key")
		assert.Nil(t, heard(), "and not announced to the others")
	})
	t.Run("waited for, the next in line's tokens name an owner with '|'", func(t *testing.T) {
		// Options.Owner may hold '|': the entry's fields are found from
		// its end, and the id and the token split by their equal length.
		id, round := "i.a|b|", "r.a|b|"
		entry := redis.Z{Score: 1, Member: id + "|" + round + "|30000|" + HandChannel + "w"}
		require.EqualValues(t, 1, release(WaitedPrefix+"tok", entry))
		assert.Equal(t, WaitedPrefix+HandPrefix+round, node.Get(ctx, "k").Val(), "handed off to the round's token, marked")
		m := heard()
		require.NotNil(t, m, "the handoff is told to the waiter's client")
		assert.Equal(t, strconv.Itoa(len(HandPrefix+round))+":"+HandPrefix+round+"k", m.Payload)
		assert.Nil(t, heard())
	})
	t.Run("waited for, the next in line's id and token differ in length", func(t *testing.T) {
		// Not an entry this client writes: the waiter is only named, and
		// the key is deleted for anyone.
		entry := redis.Z{Score: 1, Member: "ii|r|30000|" + HandChannel + "w"}
		require.EqualValues(t, 1, release(WaitedPrefix+"tok", entry))
		assert.EqualValues(t, 0, node.Exists(ctx, "k").Val(), "the key is deleted")
		m := heard()
		require.NotNil(t, m, "the release is announced")
		assert.Equal(t, ReleasedChannel+"k", m.Channel)
		assert.Equal(t, "ii|r|30000|"+HandChannel+"w", m.Payload, "naming the entry as it is")
	})
	t.Run("waited for, the clean-up of a failed round", func(t *testing.T) {
		// A clean-up names the first in line and hands nothing off,
		// with the restart guard on or off.
		for _, guard := range []time.Duration{time.Minute, 0} {
			q := New(guard, false, Handoff, "")
			entry := redis.Z{Score: 1, Member: "i|r|30000|" + HandChannel + "w"}
			require.NoError(t, node.Set(ctx, "k", WaitedPrefix+"tok", time.Minute).Err())
			require.NoError(t, node.ZAdd(ctx, line, entry).Err())
			n, err := q.RunInt(ctx, node, q.Release(Release{Keys: []string{"k"}, Token: "tok", TTL: time.Minute, Announce: true, Clean: true}))
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			assert.EqualValues(t, 0, node.Exists(ctx, "k").Val(), "guard %v: the key is deleted, not handed off", guard)
			assert.Empty(t, node.ZRange(ctx, line, 0, -1).Val(), "guard %v: the named waiter left the line", guard)
			m := heard()
			require.NotNil(t, m, "guard %v: the release is announced", guard)
			assert.Equal(t, ReleasedChannel+"k", m.Channel)
			assert.Equal(t, "r", m.Payload, "guard %v: naming the waiter's round", guard)
			assert.Nil(t, heard(), "guard %v: nothing on the waiter's hand channel", guard)
		}
	})
	t.Run("waited for, keeping tombstones, handed off", func(t *testing.T) {
		now := nodeTime(t, node)
		tomb, expired := tombstone("a", now+time.Hour), tombstone("x", now-time.Second)
		entry := redis.Z{Score: 1, Member: "i|r|30000|" + HandChannel + "w"}
		require.EqualValues(t, 1, release(WaitedPrefix+"tok"+tomb+expired, entry))
		assert.Equal(t, WaitedPrefix+HandPrefix+"r"+tomb, node.Get(ctx, "k").Val(), "handed off, marked, keeping its live tombstone")
		assert.InDelta(t, 30*time.Second, node.PTTL(ctx, "k").Val(), float64(time.Second), "for the waiter's TTL")
		m := heard()
		require.NotNil(t, m, "the handoff is told to the waiter's client")
		assert.Equal(t, "3:"+HandPrefix+"rk", m.Payload, "the hand value alone, then the key")
		assert.Nil(t, heard())
		n, err := p.RunInt(ctx, node, p.Release(Release{Keys: []string{"k"}, Token: HandPrefix + "r", TTL: time.Minute}))
		require.NoError(t, err)
		assert.EqualValues(t, 1, n, "the hand value's release")
		assert.Equal(t, TombstonePrefix+"a", node.Get(ctx, "k").Val(), "leaves the tombstone alone")
	})
	t.Run("waited for, the next in line's client is gone", func(t *testing.T) {
		// Nobody listens on the first waiter's channel: the PUBLISH that
		// tells it reaches nobody, so the key goes to the waiter after it.
		gone := redis.Z{Score: 1, Member: "a|q|30000|" + HandChannel + "gone"}
		entry := redis.Z{Score: 2, Member: "i|r|30000|" + HandChannel + "w"}
		require.EqualValues(t, 1, release(WaitedPrefix+"tok", gone, entry))
		assert.Equal(t, WaitedPrefix+HandPrefix+"r", node.Get(ctx, "k").Val(), "handed off to the next one, marked")
		assert.Empty(t, node.ZRange(ctx, line, 0, -1).Val(), "both left the line")
		m := heard()
		require.NotNil(t, m, "the handoff is told to the waiter's client")
		assert.Equal(t, "3:"+HandPrefix+"rk", m.Payload)
		assert.Nil(t, heard(), "and to nobody else")
	})
	t.Run("waited for, no waiter's client is left", func(t *testing.T) {
		gone := redis.Z{Score: 1, Member: "a|q|30000|" + HandChannel + "gone"}
		require.EqualValues(t, 1, release(WaitedPrefix+"tok", gone))
		assert.EqualValues(t, 0, node.Exists(ctx, "k").Val(), "the key is deleted, not left handed off to nobody")
		m := heard()
		require.NotNil(t, m, "the release is announced")
		assert.Equal(t, ReleasedChannel+"k", m.Channel)
		assert.Empty(t, m.Payload, "naming nobody")
	})
	t.Run("extend and fence keep the mark", func(t *testing.T) {
		require.NoError(t, node.Set(ctx, "k", WaitedPrefix+"tok", time.Second).Err())
		n, err := p.RunInt(ctx, node, p.Extend([]string{"k", StateKey}, "tok", time.Minute))
		require.NoError(t, err)
		assert.True(t, Held(n), "a marked key still holds its token")
		assert.InDelta(t, time.Minute, node.PTTL(ctx, "k").Val(), float64(time.Second))
		n, err = p.RunInt(ctx, node, p.Fence([]string{"k", StateKey}, "tok", 7))
		require.NoError(t, err)
		assert.EqualValues(t, 1, n)
		assert.Equal(t, "7", node.HGet(ctx, StateKey, "f").Val())
		assert.Equal(t, WaitedPrefix+"tok", node.Get(ctx, "k").Val())
		n, err = p.RunInt(ctx, node, p.Extend([]string{"k", StateKey}, "other", time.Minute))
		require.NoError(t, err)
		assert.False(t, Held(n), "another token does not extend it")
	})
}

// TestInLineNamesHandoffEntry: a release by a client that waits in line,
// whose next in line joined for a handoff (another client's strategy),
// names that waiter by its round's token, found from the entry's end
// whatever the owner in its tokens holds.
func TestInLineNamesHandoffEntry(t *testing.T) {
	ctx := t.Context()
	node := oneNode(t, false)
	p := New(0, false, InLine, "")
	line := LinePrefix + "k"
	sub := node.Subscribe(ctx, ReleasedChannel+"k")
	t.Cleanup(func() { _ = sub.Close() })
	_, err := sub.Receive(ctx)
	require.NoError(t, err)
	for _, c := range []struct{ entry, named string }{
		{"i|r|30000|" + HandChannel + "w", "r"},
		{"i.a|b|" + "|" + "r.a|b|" + "|30000|" + HandChannel + "w", "r.a|b|"},
		{"ii|r|30000|" + HandChannel + "w", "ii|r|30000|" + HandChannel + "w"}, // not a handoff's entry
		{"id-n", "id-n"},
	} {
		require.NoError(t, node.Del(ctx, line).Err())
		require.NoError(t, node.Set(ctx, "k", WaitedPrefix+"tok", time.Minute).Err())
		require.NoError(t, node.ZAdd(ctx, line, redis.Z{Score: 1, Member: c.entry}).Err())
		n, err := p.RunInt(ctx, node, p.Release(Release{Keys: []string{"k"}, Token: "tok", TTL: time.Minute, Announce: true}))
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		m, err := sub.ReceiveMessage(ctx)
		require.NoError(t, err)
		assert.Equal(t, c.named, m.Payload, "%s", c.entry)
	}
}

// TestReleaseTombstones runs release.lua on a real server for each value
// a lock key can hold with tombstones (tombstone.lua): what the key keeps
// afterwards, and for how long.
func TestReleaseTombstones(t *testing.T) {
	ctx := t.Context()
	node := oneNode(t, true)
	p := New(time.Minute, false, Handoff, "")
	now := nodeTime(t, node)
	a, b := tombstone("a", now+time.Hour), tombstone("b", now+2*time.Hour)
	expired := tombstone("x", now-time.Second)
	var eight string // eight tombstones, the first expiring soonest
	for i := range MaxTombstones {
		eight += tombstone(string(rune('c'+i)), now+time.Hour+time.Duration(i)*time.Minute)
	}
	for _, tc := range []struct {
		name  string
		value string // "" for no key
		ttl   time.Duration
		kept  []string      // the tokens whose tombstones k keeps after the release of "tok"
		left  time.Duration // k's TTL afterwards; 0: gone
		alone bool          // k holds one tombstone, in the previous release's form
	}{
		{"missing", "", 0, []string{"tok"}, time.Minute, true},
		{"holding tok", "tok", time.Minute, nil, 0, false},
		{"another tombstone", TombstonePrefix + "a", time.Hour, []string{"a", "tok"}, time.Hour, false},
		{"its own tombstone (a release delivered again)", TombstonePrefix + "tok", time.Hour, []string{"tok"}, time.Hour, true},
		{"its own tombstone among others", a[1:] + tombstone("tok", now+time.Minute), time.Hour, []string{"a", "tok"}, time.Hour, false},
		{"two tombstones", a[1:] + b, 2 * time.Hour, []string{"a", "b", "tok"}, 2 * time.Hour, false},
		{"an expired tombstone", expired[1:] + a, time.Hour, []string{"a", "tok"}, time.Hour, false},
		{"tok keeping a tombstone", "tok" + a, time.Minute, []string{"a"}, time.Hour, true},
		{"tok keeping two", WaitedPrefix + "tok" + b + a, time.Minute, []string{"b", "a"}, 2 * time.Hour, false},
		{"tok keeping an expired tombstone", "tok" + expired, time.Minute, nil, 0, false},
		{"another token (left alone)", "tok-other" + a, time.Minute, []string{"a"}, time.Minute, false},
		{"the most tombstones: the first to expire is dropped", eight[1:], time.Hour, []string{"d", "e", "f", "g", "h", "i", "j", "tok"}, 2 * time.Hour, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, node.Del(ctx, "k").Err())
			if tc.value != "" {
				require.NoError(t, node.Set(ctx, "k", tc.value, tc.ttl).Err())
			}
			ttl := time.Minute
			if tc.name == "the most tombstones: the first to expire is dropped" {
				ttl = 2 * time.Hour
			}
			_, err := p.RunInt(ctx, node, p.Release(Release{Keys: []string{"k"}, Token: "tok", TTL: ttl}))
			require.NoError(t, err)
			v, err := node.Get(ctx, "k").Result()
			if tc.left == 0 {
				assert.ErrorIs(t, err, redis.Nil, "k is gone, not %q", v)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.kept, buriedTokens(t, node, v))
			assert.InDelta(t, tc.left, node.PTTL(ctx, "k").Val(), float64(time.Second), "k's TTL")
			assert.Equal(t, tc.alone, !strings.Contains(v, "\t"), "%q", v)
		})
	}
}

// TestLineKeyFromPrefix: with a key prefix, the acquire finds the line
// of waiters from its state key, plain or a Cluster slot's, and the
// release from its line argument: both use prefix .. LinePrefix .. key.
func TestLineKeyFromPrefix(t *testing.T) {
	ctx := t.Context()
	node := oneNode(t, false)
	p := New(0, false, InLine, "p:")
	line := "p:" + LinePrefix + "k"
	for _, state := range []string{"p:" + StateKey, "p:" + StateKey + ":{x}"} {
		require.NoError(t, node.Del(ctx, "p:k", line).Err())
		require.NoError(t, node.Set(ctx, "p:k", "holder", time.Minute).Err())
		v, err := p.Run(ctx, node, p.AcquireCmd(Acquire{Keys: []string{"p:k", state}, Token: "tok", TTL: time.Second, Join: Join{Place: "tok", Ticket: 3}}))
		require.NoError(t, err)
		r, err := DecodeAcquire(v)
		require.NoError(t, err)
		require.Equal(t, Taken, r.Kind, state)
		assert.Equal(t, []string{"tok"}, node.ZRange(ctx, line, 0, -1).Val(), "%s: the waiter joined the prefixed line", state)

		n, err := p.RunInt(ctx, node, p.Release(Release{Keys: []string{"p:k"}, Token: "holder", TTL: time.Minute, Announce: true}))
		require.NoError(t, err)
		assert.EqualValues(t, 1, n)
		assert.Empty(t, node.ZRange(ctx, line, 0, -1).Val(), "%s: the release named the waiter, off the line", state)
	}
}
