package protocol

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// TestAcquireCases runs acquire.lua on a real server for each value a lock
// key can hold, once on a single key (taken with one SET ... NX GET when
// free) and once as the first of two keys (the general path), and checks
// that both give the same reply and leave the same value.
func TestAcquireCases(t *testing.T) {
	ctx := t.Context()
	node := oneNode(t, true)
	p := New(time.Minute, false, Handoff, "")

	const token, prev, prevRound = "tok-new", "tok-prev", "tok-round"
	now := nodeTime(t, node)
	later := tombstone("a", now+time.Minute) // a tombstone that keeps a minute
	cases := []struct {
		name  string
		value string // "" for no key
		ttl   time.Duration
		want  AcquireKind
		held  bool     // the key holds token afterwards
		kept  []string // and keeps the tombstones of these tokens
	}{
		{"free", "", 0, Granted, true, nil},
		{"own token (a retry)", token, time.Second, Granted, true, nil},
		{"own token, waited for", WaitedPrefix + token, time.Second, Granted, true, nil},
		{"another token", "tok-other", time.Minute, Taken, false, nil},
		{"another token, waited for", WaitedPrefix + "tok-other", time.Minute, Taken, false, nil},
		{"another token, no expiry", "tok-other", 0, Taken, false, nil},
		{"another token's tombstone", TombstonePrefix + "tok-other", time.Minute, Granted, true, []string{"tok-other"}},
		{"two tombstones", later[1:] + tombstone("b", now+time.Hour), time.Hour, Granted, true, []string{"a", "b"}},
		{"an expired tombstone", later[1:] + tombstone("b", now-time.Second), time.Hour, Granted, true, []string{"a"}},
		{"own token, keeping a tombstone", token + later, time.Second, Granted, true, []string{"a"}},
		{"own token, waited for, keeping a tombstone", WaitedPrefix + token + later, time.Second, Granted, true, []string{"a"}},
		{"own tombstone", TombstonePrefix + token, time.Minute, Gone, false, nil},
		{"own tombstone after another", later[1:] + tombstone(token, now+time.Hour), time.Hour, Gone, false, nil},
		{"own tombstone, kept by another token", "tok-other" + tombstone(token, now+time.Hour), time.Minute, Gone, false, nil},
		{"another token, keeping a tombstone", "tok-other" + later, time.Minute, Taken, false, nil},
		{"the handed-over lock of the same client", prev, time.Minute, Granted, true, nil},
		{"the handed-over lock of the same client, waited for", WaitedPrefix + prev, time.Minute, Granted, true, nil},
		{"a handoff to the handed-over lock's round", HandPrefix + prev, time.Minute, Granted, true, nil},
		{"a handoff to the waiter's previous round", WaitedPrefix + HandPrefix + prevRound, time.Minute, Granted, true, nil},
		{"the waiter's previous round, not yet cleaned up", prevRound, time.Minute, Granted, true, nil},
		{"a handoff to another round", WaitedPrefix + HandPrefix + "tok-other", time.Minute, Taken, false, nil},
	}
	for _, tc := range cases {
		for _, keys := range [][]string{{"k"}, {"k", "k2"}} {
			t.Run(tc.name+"/"+map[int]string{1: "one key", 2: "two keys"}[len(keys)], func(t *testing.T) {
				require.NoError(t, node.Del(ctx, keys...).Err())
				if tc.value != "" {
					require.NoError(t, node.Set(ctx, "k", tc.value, tc.ttl).Err())
				}
				cmd := p.AcquireCmd(Acquire{Keys: append(keys, StateKey), Token: token, TTL: 30 * time.Second, Handover: prev,
					Join: Join{Place: "id", Ticket: 1, Channel: "chan", Prev: prevRound}})
				v, err := p.Run(ctx, node, cmd)
				require.NoError(t, err)
				r, err := DecodeAcquire(v)
				require.NoError(t, err)
				assert.Equal(t, tc.want, r.Kind)
				got := node.Get(ctx, "k").Val()
				_, waited := Holding(tc.value)
				switch {
				case tc.held:
					// A key taken over keeps its mark and its tombstones; a
					// free one gets none.
					h, marked := Holding(got)
					assert.Equal(t, token, h)
					assert.Equal(t, waited, marked)
					assert.Equal(t, tc.kept, buriedTokens(t, node, got), "the tombstones kept")
					assert.InDelta(t, 30*time.Second, node.PTTL(ctx, "k").Val(), float64(time.Second), "the TTL asked for")
				case tc.want == Taken && tc.ttl > 0:
					// The holder keeps its token and its TTL, marked as waited for.
					assert.Equal(t, WaitedPrefix+strings.TrimPrefix(tc.value, WaitedPrefix), got, "the key is marked, its value kept")
					assert.InDelta(t, tc.ttl, node.PTTL(ctx, "k").Val(), float64(time.Second), "the holder's TTL is kept")
				default:
					assert.Equal(t, tc.value, got, "the key is untouched")
				}
				if tc.want == Taken && tc.ttl > 0 {
					assert.InDelta(t, tc.ttl, r.Wait, float64(time.Second), "the holder's time left")
				}
			})
		}
	}
}

// TestAcquireLineEntries: a round of a waiter whose client may be in line
// (Entries MayHave) takes every entry of the client off (its own earlier
// rounds', an earlier waiter's), whether it is granted or joins again; a
// round that is not in line leaves the line alone. A first round of a
// client that knows it has no entry left (Entries Cleared) leaves the
// line alone too, but its grant marks the key while others are in line.
func TestAcquireLineEntries(t *testing.T) {
	ctx := t.Context()
	node := oneNode(t, true)
	p := New(time.Minute, false, Handoff, "")
	line := LinePrefix + "k"
	named := "id-w"                    // the waiter's round from before its client's hand channel was subscribed
	prevRound := "id-w|tok-p|30000|ch" // its previous round's
	older := "id-o|tok-o|30000|ch"     // an earlier waiter's of the same client
	other := "id-x|tok-x|30000|ch-x"   // another client's
	acquire := func(a Acquire) AcquireKind {
		t.Helper()
		a.Keys, a.TTL, a.Join.Ticket, a.Join.Channel, a.Join.Place = []string{"k", StateKey}, 30*time.Second, 5, "ch", "id-w"
		v, err := p.Run(ctx, node, p.AcquireCmd(a))
		require.NoError(t, err)
		r, err := DecodeAcquire(v)
		require.NoError(t, err)
		return r.Kind
	}
	reset := func(held bool) {
		t.Helper()
		require.NoError(t, node.Del(ctx, "k", line).Err())
		require.NoError(t, node.ZAdd(ctx, line, redis.Z{Score: 1, Member: named}, redis.Z{Score: 1, Member: prevRound},
			redis.Z{Score: 2, Member: older}, redis.Z{Score: 3, Member: other}).Err())
		if held {
			require.NoError(t, node.Set(ctx, "k", "tok-holder", time.Minute).Err())
		}
	}
	all := []string{named, prevRound, older, other}
	fresh := "id-w|tok-n|30000|ch" // the round's own entry

	reset(false)
	require.Equal(t, Granted, acquire(Acquire{Token: "tok-n"}))
	assert.Equal(t, all, node.ZRange(ctx, line, 0, -1).Val(), "a first round's grant leaves the line alone")
	assert.Equal(t, "tok-n", node.Get(ctx, "k").Val(), "and does not mark the key")

	reset(false)
	require.Equal(t, Granted, acquire(Acquire{Token: "tok-n", Join: Join{Prev: "tok-p", Entries: MayHave}}))
	assert.Equal(t, []string{other}, node.ZRange(ctx, line, 0, -1).Val(), "a later round's grant takes every entry of the client off")
	assert.Equal(t, WaitedPrefix+"tok-n", node.Get(ctx, "k").Val(), "another waiter is in line: the key is marked")
	assert.InDelta(t, 30*time.Second, node.PTTL(ctx, "k").Val(), float64(time.Second), "with the TTL asked for")

	reset(false)
	require.NoError(t, node.Set(ctx, "k", TombstonePrefix+"a", time.Minute).Err())
	require.Equal(t, Granted, acquire(Acquire{Token: "tok-n", Join: Join{Prev: "tok-p", Entries: MayHave}}))
	v := node.Get(ctx, "k").Val()
	h, marked := Holding(v)
	assert.True(t, marked && h == "tok-n", "a grant over a tombstone marks the key: %q", v)
	assert.Equal(t, []string{"a"}, buriedTokens(t, node, v), "and keeps the tombstone")

	require.NoError(t, node.Del(ctx, "k", line).Err())
	require.NoError(t, node.ZAdd(ctx, line, redis.Z{Score: 1, Member: prevRound}).Err())
	require.Equal(t, Granted, acquire(Acquire{Token: "tok-n", Join: Join{Prev: "tok-p", Entries: MayHave}}))
	assert.Equal(t, "tok-n", node.Get(ctx, "k").Val(), "nobody else in line: the key is not marked")

	reset(true)
	require.Equal(t, Taken, acquire(Acquire{Token: "tok-n"}))
	assert.ElementsMatch(t, append(all, fresh), node.ZRange(ctx, line, 0, -1).Val(), "a first round joins")

	reset(true)
	require.Equal(t, Taken, acquire(Acquire{Token: "tok-n", Join: Join{Prev: "tok-p", Entries: MayHave}}))
	assert.ElementsMatch(t, []string{other, fresh}, node.ZRange(ctx, line, 0, -1).Val(),
		"a later round replaces every entry of the client with its own")

	reset(false)
	require.Equal(t, Granted, acquire(Acquire{Token: "tok-n", Join: Join{Entries: Cleared}}))
	assert.Equal(t, all, node.ZRange(ctx, line, 0, -1).Val(), "a cleared round's grant does not look for the client's entries")
	assert.Equal(t, WaitedPrefix+"tok-n", node.Get(ctx, "k").Val(), "others are in line: the key is marked")

	reset(true)
	require.Equal(t, Taken, acquire(Acquire{Token: "tok-n", Join: Join{Entries: Cleared}}))
	assert.ElementsMatch(t, append(all, fresh), node.ZRange(ctx, line, 0, -1).Val(), "a cleared round joins without looking")
}

// TestDropIsLiteral: a round that takes its client's entries off the line
// takes exactly those that end in '|' and its channel, however long the
// line, and whatever glob characters the channel holds. (ZSCAN's MATCH
// would filter on the node, but Redis 7.0 makes a string of every member
// and of every score it visits before it filters (db.c, scanCallback):
// about 10,000 instructions an entry, against the script's 3,200.)
func TestDropIsLiteral(t *testing.T) {
	ctx := t.Context()
	node := oneNode(t, true)
	p := New(time.Minute, false, Handoff, "")
	line := LinePrefix + "k"
	ch := `c*h?[a]\`
	var want, mine []string
	for i := range 2500 { // more than one ZSCAN call
		e := fmt.Sprintf("id-%d|tok-%d|30000|", i, i)
		switch i % 500 {
		case 7: // the client's own
			e += ch
			mine = append(mine, e)
		case 8: // what the channel would match as a glob
			e += `cZZhQa\`
		case 9:
			e += "x|" + ch + "x"
		default:
			e += fmt.Sprintf("ch-%d", i)
		}
		if !slices.Contains(mine, e) {
			want = append(want, e)
		}
		require.NoError(t, node.ZAdd(ctx, line, redis.Z{Score: float64(i), Member: e}).Err())
	}
	require.Len(t, mine, 5)
	require.NoError(t, node.Set(ctx, "k", "tok-holder", time.Minute).Err())
	v, err := p.Run(ctx, node, p.AcquireCmd(Acquire{Keys: []string{"k", StateKey}, Token: "tok-n", TTL: 30 * time.Second,
		Join: Join{Ticket: 9999, Channel: ch, Place: "id-w", Prev: "tok-p", Entries: MayHave}}))
	require.NoError(t, err)
	r, err := DecodeAcquire(v)
	require.NoError(t, err)
	require.Equal(t, Taken, r.Kind)
	want = append(want, "id-w|tok-n|30000|"+ch) // the round's own entry
	assert.ElementsMatch(t, want, node.ZRange(ctx, line, 0, -1).Val())
}

// TestHandEntry: a refused round that joins for a handoff adds the entry
// that HandEntry names to the line that LineKey names, with a key prefix:
// a waiter's reads of the line look for it there.
func TestHandEntry(t *testing.T) {
	ctx := t.Context()
	node := oneNode(t, true)
	p := New(time.Minute, false, Handoff, "p:")
	require.NoError(t, node.Set(ctx, "p:k", "tok-holder", time.Minute).Err())
	v, err := p.Run(ctx, node, p.AcquireCmd(Acquire{Keys: []string{"p:k", "p:" + StateKey}, Token: "tok-w", TTL: 30 * time.Second,
		Join: Join{Ticket: 1, Channel: "ch", Place: "tok-w"}}))
	require.NoError(t, err)
	r, err := DecodeAcquire(v)
	require.NoError(t, err)
	require.Equal(t, Taken, r.Kind)
	assert.Equal(t, []string{HandEntry("tok-w", "tok-w", 30*time.Second, "ch")}, node.ZRange(ctx, LineKey("p:", "k"), 0, -1).Val())
}

// TestAcquireGuardedAfterSet: a free key on a node in its restart guard is
// refused, and the key the script set before reading the guard is gone.
func TestAcquireGuardedAfterSet(t *testing.T) {
	ctx := t.Context()
	node := oneNode(t, false)
	p := New(time.Minute, false, Kernel, "")
	for _, keys := range [][]string{{"k"}, {"k", "k2"}} {
		require.NoError(t, node.FlushAll(ctx).Err()) // no state: the node lost its data
		v, err := p.Run(ctx, node, p.AcquireCmd(Acquire{Keys: append(keys, StateKey), Token: "tok", TTL: time.Second}))
		require.NoError(t, err)
		r, err := DecodeAcquire(v)
		require.NoError(t, err)
		assert.Equal(t, Guarded, r.Kind, "%d key(s)", len(keys))
		assert.Zero(t, node.Exists(ctx, keys...).Val(), "%d key(s): nothing is left set", len(keys))
	}
}

// TestAcquireGuardedTakesBack: on a node in its restart guard, a key that
// already holds the token (the pipelined acquire's SET, or a retry's) is
// taken back: it keeps only its tombstones, or is gone without any.
func TestAcquireGuardedTakesBack(t *testing.T) {
	ctx := t.Context()
	node := oneNode(t, false)
	p := New(time.Minute, false, Kernel, "")
	for _, keys := range [][]string{{"k"}, {"k", "k2"}} {
		for _, tombs := range []int{0, 1, 2} {
			require.NoError(t, node.FlushAll(ctx).Err()) // no state: the node lost its data
			now := nodeTime(t, node)
			value := "tok"
			var kept []string
			for i := range tombs {
				tok := "gone" + strconv.Itoa(i)
				value += tombstone(tok, now+time.Hour)
				kept = append(kept, tok)
			}
			require.NoError(t, node.Set(ctx, "k", value, time.Minute).Err())
			v, err := p.Run(ctx, node, p.AcquireCmd(Acquire{Keys: append(keys, StateKey), Token: "tok", TTL: time.Second}))
			require.NoError(t, err)
			r, err := DecodeAcquire(v)
			require.NoError(t, err)
			assert.Equal(t, Guarded, r.Kind, "%d key(s), %d tombstones", len(keys), tombs)
			left, err := node.Get(ctx, "k").Result()
			if tombs == 0 {
				assert.ErrorIs(t, err, redis.Nil, "%d key(s): the key is gone, not %q", len(keys), left)
				continue
			}
			require.NoError(t, err)
			assert.Equal(t, kept, buriedTokens(t, node, left), "%d key(s): only the tombstones are left", len(keys))
			assert.InDelta(t, time.Hour, node.PTTL(ctx, "k").Val(), float64(time.Second), "the key expires with its last tombstone")
		}
	}
}

// TestKernelIgnoresWaiting: without a waiting strategy the kernel reads a
// key's mark but never sets one, joins no line, and takes hand values for
// tokens like any other: a client of any strategy (or of none) shares keys
// with the others safely.
func TestKernelIgnoresWaiting(t *testing.T) {
	ctx := t.Context()
	node := oneNode(t, true)
	p := New(time.Minute, false, Kernel, "")
	for _, tc := range []struct {
		value, after string // after: the key's value after the acquire
		want         AcquireKind
	}{
		{"tok-other", "tok-other", Taken},
		{WaitedPrefix + "tok-other", WaitedPrefix + "tok-other", Taken},
		{WaitedPrefix + "tok", WaitedPrefix + "tok", Granted},
		{HandPrefix + "tok", HandPrefix + "tok", Taken},
		{"tok-handover", "tok", Granted},
		{WaitedPrefix + "tok-handover", WaitedPrefix + "tok", Granted},
	} {
		require.NoError(t, node.Set(ctx, "k", tc.value, time.Minute).Err())
		cmd := p.AcquireCmd(Acquire{Keys: []string{"k", StateKey}, Token: "tok", TTL: time.Minute, Handover: "tok-handover",
			Join: Join{Place: "tok", Ticket: 1, Entries: MayHave}})
		v, err := p.Run(ctx, node, cmd)
		require.NoError(t, err)
		r, err := DecodeAcquire(v)
		require.NoError(t, err)
		assert.Equal(t, tc.want, r.Kind, tc.value)
		assert.Equal(t, tc.after, node.Get(ctx, "k").Val(), tc.value)
		assert.Zero(t, node.Exists(ctx, LinePrefix+"k").Val(), "%s: no line", tc.value)
	}
	require.NoError(t, node.Set(ctx, "k", WaitedPrefix+"tok", time.Minute).Err())
	n, err := p.RunInt(ctx, node, p.Release(Release{Keys: []string{"k"}, Token: "tok", TTL: time.Minute, Announce: true}))
	require.NoError(t, err)
	assert.True(t, Held(n), "a marked key is released by its holder")
	assert.Zero(t, node.Exists(ctx, "k").Val())
}

// oneNode starts a redis-server for t and returns a client of it; with
// established, the node's state is that of an established deployment.
func oneNode(t testing.TB, established bool) *redis.Client {
	t.Helper()
	redisproc.Require(t)
	s, err := redisproc.Start(t.Context(), 1)
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	node := redis.NewClient(&redis.Options{Addr: s.Addrs[0], Protocol: 2})
	t.Cleanup(func() { _ = node.Close() })
	if established {
		require.NoError(t, node.HSet(t.Context(), StateKey, "g", "0").Err())
	}
	return node
}

// nodeTime returns node's clock, as the scripts read it (TIME).
func nodeTime(t *testing.T, node *redis.Client) time.Duration {
	t.Helper()
	now, err := node.Time(t.Context()).Result()
	require.NoError(t, err)
	return time.Duration(now.UnixMilli()) * time.Millisecond
}

// tombstone returns token's tombstone as a key keeps it after a holder,
// expiring at node time at (see nodeTime).
func tombstone(token string, at time.Duration) string {
	return "\n" + TombstonePrefix + token + "\t" + strconv.FormatInt(at.Milliseconds(), 10)
}

// buriedTokens returns the tokens whose tombstones value keeps, in order,
// and checks that each one expires within a day of node time, and that
// the key expires no earlier than its last tombstone.
func buriedTokens(t *testing.T, node *redis.Client, value string) []string {
	t.Helper()
	_, tail, _ := strings.Cut(value, "\n")
	if strings.HasPrefix(value, TombstonePrefix) {
		tail = value
	}
	now := nodeTime(t, node)
	var tokens []string
	for e := range strings.SplitSeq(tail, "\n") {
		if e == "" {
			continue
		}
		tomb, exp, ok := strings.Cut(e, "\t")
		tok, isTomb := strings.CutPrefix(tomb, TombstonePrefix)
		require.True(t, isTomb, "%q is not a tombstone", e)
		if ok {
			ms, err := strconv.ParseInt(exp, 10, 64)
			require.NoError(t, err)
			at := time.Duration(ms) * time.Millisecond
			assert.True(t, at > now && at < now+24*time.Hour, "%s's tombstone expires at %v, node time %v", tok, at, now)
		}
		tokens = append(tokens, tok)
	}
	return tokens
}
