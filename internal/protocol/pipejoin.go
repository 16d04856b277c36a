package protocol

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The pipelined join is the usual refusal of a waiter's round, its join of
// the key's line for a handoff on the node, without a script: one MULTI
// transaction of SET key token NX PX ttl GET, ZADD line NX ticket entry,
// PTTL key and PEXPIRE line. The server runs it as one step, as it runs a
// script. Its reply decides only the usual case: the key held, marked, by
// another token that has a TTL, and no tombstone of this token on it. Then
// the waiter stands in line exactly as acquire.lua's refusal would have put
// it. Every other reply sends the acquire script. Where the key was free
// for the round (the SET set it, or it held only tombstones, the token, or
// the waiter's previous round), the script goes as a round that may have
// entries left (MayHave): it grants the key only on an established node
// (taking back what the SET set on a guarded one) and its grant takes the
// transaction's entry off the line. Otherwise it goes as it was: it marks
// an unmarked key, and finds the entry there already. A transaction that
// did not answer may have set the key, as any acquire. docs/SAFETY.md,
// "The pipelined join", and model/redlock.pml (PIPEJOIN) check it.

// PipelinedJoin reports whether a may be sent as the pipelined join: the
// round of a waiter with the handoff on the node, on one key, for a token
// (not a hand value), by a client that knows it has no entry left in the
// line (NoWait or Cleared), with no fence, shortcut, handover or layer.
func (p *Protocol) PipelinedJoin(a *Acquire) bool {
	j := a.Join
	return p.strategy == Handoff && !p.fencing && len(a.Keys) == 2 && j.Place != "" && j.Channel != "" &&
		j.Entries != MayHave && a.Shortcut == (Shortcut{}) && a.Handover == "" && a.Layer.Role == NoLayer &&
		!strings.HasPrefix(a.Token, HandPrefix) && strings.HasSuffix(a.Keys[1], StateKey) &&
		strings.HasPrefix(a.Keys[0], strings.TrimSuffix(a.Keys[1], StateKey))
}

// JoinCmds is one node's pipelined join: its commands, sent in order on one
// connection, and then its reply. Return it with [Protocol.PutJoin] once
// its reply has been read.
type JoinCmds struct {
	multi, set, zadd, pttl, pexpire *redis.StatusCmd // each answers QUEUED
	exec                            *redis.SliceCmd
	setArgs                         [7]any // set key token nx px ttl get
	zaddArgs                        [5]any // zadd line nx ticket entry
	pttlArgs                        [2]any // pttl key
	pexpireArgs                     [3]any // pexpire line ms
	cmds                            [6]redis.Cmder
	token, prev                     string
}

// NewJoin returns the pipelined join of a (see [Protocol.PipelinedJoin]):
// it joins the first key's line as acquire.lua's refusal does, and keeps
// the line for twice the round's TTL, where the script keeps it for the
// holder's TTL left and the round's.
func (p *Protocol) NewJoin(ctx context.Context, a *Acquire) *JoinCmds {
	jc, _ := p.joins.Get().(*JoinCmds)
	if jc == nil {
		jc = &JoinCmds{}
		jc.setArgs[0], jc.setArgs[3], jc.setArgs[4], jc.setArgs[6] = "set", "nx", "px", "get"
		jc.zaddArgs[0], jc.zaddArgs[2] = "zadd", "nx"
		jc.pttlArgs[0], jc.pexpireArgs[0] = "pttl", "pexpire"
		// ctx is kept by go-redis for nothing but clones of the command.
		jc.multi = redis.NewStatusCmd(ctx, "multi")
		jc.set = redis.NewStatusCmd(ctx, jc.setArgs[:]...)
		jc.zadd = redis.NewStatusCmd(ctx, jc.zaddArgs[:]...)
		jc.pttl = redis.NewStatusCmd(ctx, jc.pttlArgs[:]...)
		jc.pexpire = redis.NewStatusCmd(ctx, jc.pexpireArgs[:]...)
		jc.exec = redis.NewSliceCmd(ctx, "exec")
		jc.cmds = [6]redis.Cmder{jc.multi, jc.set, jc.zadd, jc.pttl, jc.pexpire, jc.exec}
	}
	j := a.Join
	prefix := strings.TrimSuffix(a.Keys[1], StateKey)
	line := prefix + LinePrefix + a.Keys[0][len(prefix):]
	ms := a.TTL.Milliseconds()
	key := any(a.Keys[0])
	jc.setArgs[1], jc.setArgs[2], jc.setArgs[5] = key, a.Token, p.ttlArg(a.TTL)
	jc.zaddArgs[1], jc.zaddArgs[3] = line, p.ticketArg(j.Ticket)
	jc.zaddArgs[4] = j.Place + "|" + a.Token + "|" + strconv.FormatInt(ms, 10) + "|" + j.Channel
	jc.pttlArgs[1], jc.pexpireArgs[1], jc.pexpireArgs[2] = key, jc.zaddArgs[1], 2*ms
	jc.token, jc.prev = a.Token, j.Prev
	for _, c := range [...]*redis.StatusCmd{jc.multi, jc.set, jc.zadd, jc.pttl, jc.pexpire} {
		c.SetVal("")
		c.SetErr(nil)
	}
	jc.exec.SetVal(nil)
	jc.exec.SetErr(nil)
	return jc
}

// PutJoin returns jc for reuse.
func (p *Protocol) PutJoin(jc *JoinCmds) {
	clear(jc.setArgs[1:3])
	jc.setArgs[5] = nil
	clear(jc.zaddArgs[3:])
	jc.zaddArgs[1], jc.pttlArgs[1], jc.pexpireArgs[1], jc.pexpireArgs[2] = nil, nil, nil, nil
	jc.token, jc.prev = "", ""
	p.joins.Put(jc)
}

// Cmds returns the commands to send, in this order, on one connection.
func (jc *JoinCmds) Cmds() []redis.Cmder { return jc.cmds[:] }

// Reply returns the node's answer once the commands have run. joined is
// false when the reply decides nothing and the acquire script must be sent:
// as a round that may have entries left (MayHave) when free is set, for the
// key was free for the round (or may have been: the transaction failed),
// so that the script's grant takes the transaction's entry off; as it was
// otherwise (the script marks an unmarked key, and adds the same entry,
// which is there already). err is set when the transaction's reply did not
// come: the node may hold the key.
func (jc *JoinCmds) Reply() (rep AcquireReply, joined, free bool, err error) {
	vals, err := jc.exec.Result()
	if err != nil {
		if isServerError(err) {
			// Refused or aborted: the script answers. Where MULTI itself was
			// refused, the commands after it ran one by one: the SET may have
			// set the key, and the ZADD left the entry.
			return AcquireReply{}, false, true, nil
		}
		return AcquireReply{}, false, false, err
	}
	if len(vals) != 4 {
		return AcquireReply{}, false, false, nil
	}
	v, ok := vals[0].(string)
	if !ok {
		// nil: the SET set the key; an error: the script answers.
		return AcquireReply{}, false, vals[0] == nil, nil
	}
	switch left, _ := vals[2].(int64); refusal(v, jc.token, jc.prev) {
	case refused:
		if left > 0 {
			return AcquireReply{Kind: Taken, Wait: time.Duration(left) * time.Millisecond}, true, false, nil
		}
		return AcquireReply{}, false, false, nil // no expiry: the script answers
	case freeKey:
		return AcquireReply{}, false, true, nil
	default:
		return AcquireReply{}, false, false, nil
	}
}

// Refused reports whether the server refused a command of the transaction
// for good: the ACL forbids it (NOPERM), MULTI among them, the server does
// not know it, or reads it as a syntax error (SET with both NX and GET
// before Redis 7.0). A node that refuses one refuses the next: its
// waiters' rounds are better sent as the script alone. (A passing error,
// LOADING or OOM, is not such a refusal.)
func (jc *JoinCmds) Refused() bool {
	for _, c := range jc.cmds {
		if err := c.Err(); isServerError(err) && refusedForGood(err.Error()) {
			return true
		}
	}
	return false
}

// refusedForGood reports whether msg, a server's error reply, would come
// again for the same command.
func refusedForGood(msg string) bool {
	return strings.Contains(msg, "NOPERM") || strings.Contains(msg, "unknown command") || strings.Contains(msg, "syntax error")
}

// What a key's value is to a round's acquire, as acquire.lua sees it.
const (
	refused  = iota // a marked key that another token holds
	freeKey         // no holder (tombstones only), the token, or the waiter's previous round
	unmarked        // another token holds it, unmarked
	gone            // the key keeps the token's tombstone
)

// refusal returns what v, a key's value, is to token's round, whose
// waiter's previous round was prev ("" for none).
func refusal(v, token, prev string) int {
	h, marked := Holding(v)
	rest := "" // the tombstones, each after a '\n'
	if i := strings.IndexByte(v, '\n'); i >= 0 {
		rest = v[i:]
	}
	if strings.HasPrefix(h, TombstonePrefix) { // no holder: the first tombstone
		h, rest = "", "\n"+h+rest
	}
	switch {
	case buried(rest, token):
		return gone
	case h == "" || h == token:
		return freeKey
	case prev != "" && (h == prev || h == HandPrefix+prev):
		return freeKey
	case !marked:
		return unmarked
	}
	return refused
}

// buried reports whether rest, the tombstones of a key (each after a
// '\n', perhaps followed by '\t' and its expiry), hold token's, as
// acquire.lua's buried.
func buried(rest, token string) bool {
	e := "\n" + TombstonePrefix + token
	for rest != "" {
		i := strings.Index(rest, e)
		if i < 0 {
			return false
		}
		rest = rest[i+len(e):]
		if rest == "" || rest[0] == '\n' || rest[0] == '\t' {
			return true
		}
	}
	return false
}
