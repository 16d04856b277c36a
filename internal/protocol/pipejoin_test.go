package protocol

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRefusalAsScript: for each value a lock key can hold, the pipelined
// join's reading of it (refusal) is what acquire.lua does with a waiter's
// first round on a real server: a refusal that leaves the value as it was
// (refused), one that marks it first (unmarked), a grant (freeKey) or a
// reply that the round released the node already (gone).
func TestRefusalAsScript(t *testing.T) {
	ctx := t.Context()
	node := oneNode(t, true)
	p := New(time.Minute, false, Handoff, "")
	const token, prev = "tok-new", "tok-prev"
	now := nodeTime(t, node)
	later := tombstone("a", now+time.Minute)
	for _, v := range []string{
		"tok-other", WaitedPrefix + "tok-other", "tok-other" + later, WaitedPrefix + "tok-other" + later,
		WaitedPrefix + "tok-newer", WaitedPrefix + "tok-ne", // tokens that share a prefix with token
		WaitedPrefix + "tok-other" + tombstone("tok-newer", now+time.Minute), // and a tombstone that does
		token, WaitedPrefix + token, token + later, WaitedPrefix + HandPrefix + token,
		prev, WaitedPrefix + prev, WaitedPrefix + HandPrefix + prev, HandPrefix + prev, WaitedPrefix + HandPrefix + "tok-other",
		TombstonePrefix + "tok-other", later[1:] + tombstone("b", now+time.Hour),
		TombstonePrefix + token, WaitedPrefix + TombstonePrefix + token, later[1:] + tombstone(token, now+time.Hour),
		tombstone(token, now+time.Hour)[1:] + later, "tok-other" + tombstone(token, now+time.Hour),
		WaitedPrefix + "tok-other" + later + tombstone(token, now+time.Hour),
	} {
		t.Run(v, func(t *testing.T) {
			require.NoError(t, node.Del(ctx, "k", LinePrefix+"k").Err())
			require.NoError(t, node.Set(ctx, "k", v, time.Hour).Err())
			cmd := p.AcquireCmd(Acquire{Keys: []string{"k", StateKey}, Token: token, TTL: 30 * time.Second,
				Join: Join{Place: "id", Ticket: 1, Entries: Cleared, Channel: "chan", Prev: prev}})
			r, err := p.Run(ctx, node, cmd)
			require.NoError(t, err)
			rep, err := DecodeAcquire(r)
			require.NoError(t, err)
			after := node.Get(ctx, "k").Val()
			var want int
			switch {
			case rep.Kind == Granted:
				want = freeKey
			case rep.Kind == Gone:
				want = gone
			case rep.Kind == Taken && after == v:
				want = refused
			case rep.Kind == Taken && after == WaitedPrefix+v:
				want = unmarked
			default:
				t.Fatalf("the script answered %+v and left %q", rep, after)
			}
			assert.Equal(t, want, refusal(v, token, prev))
		})
	}
	// A waiter's round without a previous round counts that token as another's.
	assert.Equal(t, refused, refusal(WaitedPrefix+prev, token, ""))
	assert.Equal(t, refused, refusal(WaitedPrefix+HandPrefix, token, ""))
}

// TestRefusedForGood: the errors after which a node sends no more
// pipelined joins, as Redis 7.0 words them (an ACL's NOPERM, an unknown
// command, the syntax error that SET with both NX and GET meets before
// 7.0, each alone or as EXEC's abort), and passing ones that do not stop
// them.
func TestRefusedForGood(t *testing.T) {
	for msg, want := range map[string]bool{
		"NOPERM User locker has no permissions to run the 'multi' command":                true,
		"EXECABORT Transaction discarded because of: NOPERM this user has no permissions": true,
		"ERR unknown command 'multi', with args beginning with: ":                         true,
		"ERR syntax error": true,
		"EXECABORT Transaction discarded because of: ERR syntax error": true,
		"LOADING Redis is loading the dataset in memory":               false,
		"OOM command not allowed when used memory > 'maxmemory'.":      false,
		"BUSY Redis is busy running a script.":                         false,
		"ERR EXEC without MULTI":                                       false,
	} {
		assert.Equal(t, want, refusedForGood(msg), msg)
	}
}
