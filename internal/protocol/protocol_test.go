package protocol

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/hashslot"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// TestRunInt runs a script by SHA, loads it after NOSCRIPT (first use, and
// after SCRIPT FLUSH), and reports errors.
func TestRunInt(t *testing.T) {
	s := redisproc.StartT(t, 1)
	c := redis.NewClient(&redis.Options{Addr: s.Addrs[0], MaxRetries: -1}) // the dead server's error at once
	t.Cleanup(func() { _ = c.Close() })
	ctx := t.Context()
	p := New(0, false, Handoff, "")
	require.NoError(t, c.MSet(ctx, "a", "tok", "b", "tok").Err())

	v, err := p.RunInt(ctx, c, p.Release(Release{Keys: []string{"a", "b"}, Token: "other", TTL: time.Second, Announce: false}))
	require.NoError(t, err, "first call: NOSCRIPT, then EVAL")
	assert.False(t, Held(v), "another token: left alone")
	assert.Equal(t, int64(1), c.Exists(ctx, "a").Val())

	require.NoError(t, c.ScriptFlush(ctx).Err())
	v, err = p.RunInt(ctx, c, p.Release(Release{Keys: []string{"a", "b"}, Token: "tok", TTL: time.Second, Announce: true}))
	require.NoError(t, err, "after SCRIPT FLUSH the script is loaded again")
	assert.True(t, Held(v))
	assert.Zero(t, c.Exists(ctx, "a", "b").Val())

	s.Kill(0)
	_, err = p.RunInt(ctx, c, p.Release(Release{Keys: []string{"a"}, Token: "tok", TTL: time.Second, Announce: true}))
	assert.Error(t, err)
}

// TestReleaseAfter builds a release from an acquire's command: the lock keys
// and the token are shared, the state key and the acquire's other
// arguments are not. An unannounced release sends token and ttl; an
// unlock also the state key, and with handoffs the hand channel to leave and
// whether the guard is off; a clean-up with handoffs "n" instead of the
// latter.
func TestReleaseAfter(t *testing.T) {
	p := New(time.Minute, false, Announce, "")
	acq := p.AcquireCmd(Acquire{Keys: []string{"a", "b", "state"}, Token: "tok", TTL: 1500 * time.Millisecond})
	assert.Equal(t, Cmd{"evalsha", p.acquire.sha, 3, "a", "b", "state", "tok", int64(1500), int64(60000)}, acq)
	unlock := Release{Keys: []string{"a", "b"}, Token: "tok", TTL: 1500 * time.Millisecond, Announce: true}
	assert.Equal(t, p.Release(unlock), p.ReleaseAfter(acq, Release{Announce: true}))
	assert.Equal(t, Cmd{"evalsha", p.release.sha, 2, "a", "b", "tok", int64(1500)}, p.ReleaseAfter(acq, Release{}), "unannounced")
	assert.Equal(t, p.ReleaseAfter(acq, Release{}), p.ReleaseAfter(acq, Release{Announce: true, Clean: true}),
		"a clean-up where nobody is in line: unannounced")
	in := New(time.Minute, false, InLine, "")
	assert.Equal(t, in.ReleaseAfter(acq, Release{Announce: true}), in.ReleaseAfter(acq, Release{Announce: true, Clean: true}),
		"a clean-up in line, without handoffs: as an unlock")
	assert.Equal(t, Cmd{"evalsha", p.release.sha, 2, "a", "b", "tok", int64(1500), StateKey}, p.ReleaseAfter(acq, Release{Announce: true}))
	k := New(time.Minute, false, Kernel, "")
	assert.Equal(t, Cmd{"evalsha", k.release.sha, 2, "a", "b", "tok", int64(1500)}, k.ReleaseAfter(acq, Release{Announce: true}),
		"the kernel alone announces nothing")

	l := New(time.Minute, false, Handoff, "p:").WithHandChannel("ch")
	acq = l.AcquireCmd(Acquire{Keys: []string{"p:a", "p:" + StateKey}, Token: "tok", TTL: time.Second, Join: Join{Place: "tok", Ticket: 7}})
	assert.Equal(t, Cmd{"evalsha", l.release.sha, 1, "p:a", "tok", int64(1000), "p:" + StateKey}, l.ReleaseAfter(acq, Release{Announce: true}))
	assert.Equal(t, Cmd{"evalsha", l.release.sha, 1, "p:a", "tok", int64(0), "p:" + StateKey, "ch"},
		l.Release(Release{Keys: []string{"p:a"}, Token: "tok", Announce: true, Leave: true}), "leave: no tombstone, and the channel")
	u := New(0, false, Handoff, "").WithHandChannel("ch")
	assert.Equal(t, Cmd{"evalsha", u.release.sha, 1, "a", "tok", int64(0), StateKey, "", "1"},
		u.Release(Release{Keys: []string{"a"}, Token: "tok", Announce: true}), "the restart guard off")
	for _, q := range []*Protocol{l, u} {
		assert.Equal(t, Cmd{"evalsha", q.release.sha, 1, "a", "tok", int64(0), q.state, "", "n"},
			q.Release(Release{Keys: []string{"a"}, Token: "tok", Announce: true, Clean: true}), "a clean-up: nothing handed off")
	}
}

// TestAcquireArgs: the acquire sends ARGV[1..3], then the strategy's for a
// round that joins, then the kernel's shortcut and over, only up to the
// last one set, the unset ones before it as "".
func TestAcquireArgs(t *testing.T) {
	keys := []string{"k", StateKey}
	line, hand := New(time.Minute, false, InLine, ""), New(time.Minute, false, Handoff, "")
	for _, tc := range []struct {
		name string
		p    *Protocol
		a    Acquire
		argv []any // after token, ttl and guard
	}{
		{"TryLock", hand, Acquire{}, nil},
		{"a waiter's first round", line, Acquire{Join: Join{Place: "tok", Ticket: 5}}, []any{int64(5)}},
		{"a waiter's later round", line, Acquire{Join: Join{Place: "id", Ticket: 5, Entries: MayHave}}, []any{int64(5), "id", "1"}},
		{"establish", line, Acquire{Shortcut: Shortcut{ID: "id", Mark: "h", Establish: true}}, []any{"", "", "", "ehid"}},
		{"mark, kernel", New(time.Minute, false, Kernel, ""), Acquire{Shortcut: Shortcut{ID: "id", Mark: "h"}}, []any{"mhid"}},
		{"handed over", line, Acquire{Handover: "old", Join: Join{Place: "tok", Ticket: 5}}, []any{int64(5), "", "", "", "old"}},
		{"for a handoff", hand, Acquire{Join: Join{Place: "id", Ticket: 5, Channel: "ch", Prev: "r0", Entries: MayHave}},
			[]any{int64(5), "id", "1", "ch", "r0"}},
		{"a first round for a handoff, cleared", hand, Acquire{Join: Join{Place: "tok", Ticket: 5, Channel: "ch", Entries: Cleared}},
			[]any{int64(5), "", "2", "ch"}},
		{"no line", New(time.Minute, false, Announce, ""), Acquire{Join: Join{Place: "tok", Ticket: 5}}, nil},
	} {
		tc.a.Keys, tc.a.Token, tc.a.TTL = keys, "tok", time.Second
		cmd := tc.p.AcquireCmd(tc.a)
		want := append(Cmd{"evalsha", tc.p.acquire.sha, 2, "k", StateKey, "tok", int64(1000), tc.p.guard}, tc.argv...)
		assert.Equal(t, want, cmd, tc.name)
	}
}

// TestDecodeAcquire covers every reply of acquire.lua.
func TestDecodeAcquire(t *testing.T) {
	for _, tc := range []struct {
		reply any
		want  AcquireReply
	}{
		{int64(0), AcquireReply{Kind: Granted}},
		{[]any{int64(0), int64(7)}, AcquireReply{Kind: Granted, Fence: 7}},
		{[]any{int64(0), int64(-1)}, AcquireReply{Kind: Granted, Fence: -1}},
		{int64(1500), AcquireReply{Kind: Taken, Wait: 1500 * time.Millisecond}},
		{int64(-1), AcquireReply{Kind: Taken, Wait: -time.Millisecond}},
		{int64(-3), AcquireReply{Kind: Gone}},
		{[]any{int64(-2), int64(900), "id", ""}, AcquireReply{Kind: Guarded, Wait: 900 * time.Millisecond, StateID: "id"}},
		{[]any{int64(-2), int64(900), "id", "h"}, AcquireReply{Kind: Guarded, Wait: 900 * time.Millisecond, StateID: "id", Mark: "h"}},
	} {
		got, err := DecodeAcquire(tc.reply)
		require.NoError(t, err, "%v", tc.reply)
		assert.Equal(t, tc.want, got, "%v", tc.reply)
	}
	for _, bad := range []any{int64(-2), "OK", []any{int64(-2), int64(1)}, []any{int64(-2), int64(1), "id"}, nil} {
		_, err := DecodeAcquire(bad)
		assert.ErrorContains(t, err, "unexpected reply", "%v", bad)
	}
}

// TestDecodeCheck covers every reply of check.lua.
func TestDecodeCheck(t *testing.T) {
	for _, tc := range []struct {
		reply any
		want  CheckReply
	}{
		{[]any{int64(0), "abc"}, CheckReply{Kind: Same, ID: "abc"}},
		{[]any{int64(1), "abc", int64(60000)}, CheckReply{Kind: Changed, ID: "abc", Guard: time.Minute}},
		{[]any{int64(-1), "slave"}, CheckReply{Kind: NotMaster, Detail: "slave"}},
		{[]any{int64(-2), "NOPERM"}, CheckReply{Kind: Unchecked, Detail: "NOPERM"}},
	} {
		got, err := DecodeCheck(tc.reply)
		require.NoError(t, err, "%v", tc.reply)
		assert.Equal(t, tc.want, got, "%v", tc.reply)
	}
	for _, bad := range []any{int64(0), []any{int64(1), "abc"}, []any{int64(5), "x"}, nil} {
		_, err := DecodeCheck(bad)
		assert.ErrorContains(t, err, "unexpected reply", "%v", bad)
	}
}

// TestNames: the scripts name the reserved keys and channels only through
// the constants, which fill in every placeholder.
func TestNames(t *testing.T) {
	for name, lua := range map[string]string{"acquire": acquireLua, "release": releaseLua, "extend": extendLua, "fence": fenceLua, "check": checkLua,
		"value": valueLua, "announce": announceLua, "inline": inLineLua, "handoff": handoffLua} {
		assert.NotContains(t, lua, "redquorum:", "%s.lua spells a reserved name instead of its placeholder", name)
		assert.NotRegexp(t, `@[A-Z]+@`, newScript(strings.ReplaceAll(lua, "@FENCED@", "false")).src, "%s.lua has a placeholder left", name)
	}
	p := New(0, true, Handoff, "")
	for _, src := range []string{p.acquire.src, p.release.src, p.extend.src, p.fence.src} {
		assert.NotRegexp(t, `@[A-Z]+@|\n\s*--@`, src, "a placeholder or a hook mark left")
	}
	assert.Contains(t, p.acquire.src, "'"+TombstonePrefix+"'")
	assert.Contains(t, p.release.src, "'"+ReleasedChannel+"' .. key")
	assert.True(t, Reserved(StateKey) && Reserved(LinePrefix+"k") && Reserved(StateKey+":{a}") && Reserved(LeaderPrefix+"k"))
	assert.False(t, Reserved("job") || Reserved("redquorum:job"), "lock keys")
	assert.True(t, strings.HasPrefix(SlotStateKey("p:", "k", new(hashslot.Tags)), "p:"+StateKey+":{"), "%s", SlotStateKey("p:", "k", new(hashslot.Tags)))
}

// TestToken: a token is 22 random characters, then the owner after a dot.
func TestToken(t *testing.T) {
	a, b := NewToken(""), NewToken("")
	assert.Len(t, a, TokenRandomLen)
	assert.NotEqual(t, a, b, "random")
	assert.Empty(t, Owner(a))
	tok := NewToken("web-1:4242")
	assert.Len(t, tok, TokenRandomLen+1+len("web-1:4242"))
	assert.Equal(t, "web-1:4242", Owner(tok))
	assert.Equal(t, "a.b", Owner(NewToken("a.b")), "an owner may contain dots")
	assert.Empty(t, Owner("not-a-token"))
	if !raceEnabled { // the race detector adds allocations of its own
		assert.Equal(t, 1.0, testing.AllocsPerRun(100, func() { _ = NewToken("web-1:4242") }), "one allocation")
	}
}

// TestStateMark: the mark depends on the ids seen, repeats included, and
// not on the order of the nodes.
func TestStateMark(t *testing.T) {
	m := StateMark([]string{"a", "b", "a"})
	assert.Len(t, m, 32)
	assert.Equal(t, m, StateMark([]string{"b", "a", "a"}), "any order")
	assert.NotEqual(t, m, StateMark([]string{"a", "b", "b"}), "repeats count")
	assert.NotEqual(t, m, StateMark([]string{"a", "b", "c"}))
}
