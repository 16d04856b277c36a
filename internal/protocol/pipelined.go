package protocol

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The pipelined acquire is the usual case of acquire.lua's fast path without
// a script: SET key token NX PX ttl, then HGET state g when the restart guard
// is on, sent together on one connection. It saves the node the script's run.
// The SET grants the key only if the HGET, which the server runs after it,
// finds the node established. A server that lost its data since has either
// dropped the connection, so the HGET never answers, or has no state, so the
// HGET finds none. Any other reply sends the script. Where the SET set the
// key, the script finds it holding the token, and takes it back on a guarded
// node. Where the SET found a value, the script does what a refusal does for
// the waiting strategy. docs/SAFETY.md, "The pipelined acquire", and
// model/redlock.pml (PIPE) check the two steps.

// Pipelined reports whether a may be sent as the pipelined acquire. a must
// be a lock (no limit layer) on one key, for a token (not a hand value). It
// must have no fence, no strategy part, no shortcut and no Over.
func (p *Protocol) Pipelined(a *Acquire) bool {
	return !p.fencing && len(a.Keys) == 2 && a.Join == (Join{}) && a.Shortcut == (Shortcut{}) &&
		a.Handover == "" && a.Layer.Role == NoLayer && !strings.HasPrefix(a.Token, HandPrefix)
}

// PipelinedAcquire is one node's pipelined acquire: its commands, sent in
// order, and then its reply. Return it with [Protocol.PutPipelined] once
// its reply has been read.
type PipelinedAcquire struct {
	set, guard *redis.StringCmd
	setArgs    [6]any // set key token nx px ttl
	guardArgs  [3]any // hget state g
	cmds       [2]redis.Cmder
	guarded    bool // the restart guard is on: HGET is sent
}

// NewPipelined returns the pipelined acquire of a on a node whose state key
// is a.Keys[1] (see [Protocol.Pipelined]). shared, when not nil, is a's
// acquire command as [Protocol.AcquireCmd] built it, whose boxed keys,
// token and ttl it reuses.
func (p *Protocol) NewPipelined(ctx context.Context, a *Acquire, shared Cmd) *PipelinedAcquire {
	pa, _ := p.pipes.Get().(*PipelinedAcquire)
	if pa == nil {
		pa = &PipelinedAcquire{}
		pa.setArgs[0], pa.setArgs[3], pa.setArgs[4] = "set", "nx", "px"
		pa.guardArgs[0], pa.guardArgs[2] = "hget", "g"
		// ctx is kept by go-redis for nothing but clones of the command.
		pa.set = redis.NewStringCmd(ctx, pa.setArgs[:]...)
		pa.guard = redis.NewStringCmd(ctx, pa.guardArgs[:]...)
		pa.cmds = [2]redis.Cmder{pa.set, pa.guard}
		pa.guarded = p.guard != int64(0) // the pool is p's: the same for every use
	}
	if len(shared) >= 7 {
		pa.setArgs[1], pa.guardArgs[1], pa.setArgs[2], pa.setArgs[5] = shared[3], shared[4], shared[5], shared[6]
	} else {
		pa.setArgs[1], pa.guardArgs[1], pa.setArgs[2], pa.setArgs[5] = a.Keys[0], a.Keys[1], a.Token, p.ttlArg(a.TTL)
	}
	for _, c := range [...]*redis.StringCmd{pa.set, pa.guard} {
		c.SetVal("")
		c.SetErr(nil)
	}
	return pa
}

// PutPipelined returns pa for reuse.
func (p *Protocol) PutPipelined(pa *PipelinedAcquire) {
	clear(pa.setArgs[1:3])
	pa.setArgs[5], pa.guardArgs[1] = nil, nil
	p.pipes.Put(pa)
}

// Cmds returns the commands to send, in this order, on one connection.
func (pa *PipelinedAcquire) Cmds() []redis.Cmder {
	if !pa.guarded {
		return pa.cmds[:1]
	}
	return pa.cmds[:]
}

// Reply returns the node's answer once the commands have run. granted is
// false when the replies decide nothing and the acquire script must be sent.
// found is set when the SET found a value: the key is taken, or holds
// tombstones or the token itself. err is set when a reply did not come, and
// the node may hold the key. SET without GET answers OK or nil, and HGET the
// guard. So an uncontended acquire meets no nil reply, whose error checks in
// go-redis would cost allocations.
func (pa *PipelinedAcquire) Reply() (granted, found bool, err error) {
	_, err = pa.set.Result()
	switch {
	case errors.Is(err, redis.Nil): // not set: the key has a value
		return false, true, nil
	case err != nil:
		if isServerError(err) {
			return false, false, nil // the script answers
		}
		return false, false, err
	case !pa.guarded: // set, with no restart guard
		return true, false, nil
	}
	g, err := pa.guard.Result()
	if err != nil && !errors.Is(err, redis.Nil) && !isServerError(err) {
		return false, false, err
	}
	return err == nil && g == "0", false, nil
}

// isServerError reports whether err is an error reply from the server
// (the command ran, or was refused), not a failure to get a reply.
func isServerError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}
