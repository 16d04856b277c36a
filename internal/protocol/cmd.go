package protocol

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cmd is a script call as sent: "evalsha", the script's SHA, the number of
// keys, the keys and the arguments. A command is built once and may be sent
// to several nodes at once; nobody modifies it after it is built.
type Cmd []any

// newCmd builds the command that runs s on keys with argv.
func newCmd(s script, keys []string, argv ...any) Cmd {
	cmd := make(Cmd, 0, 3+len(keys)+len(argv))
	cmd = append(cmd, "evalsha", s.sha, len(keys))
	for _, k := range keys {
		cmd = append(cmd, k)
	}
	return append(cmd, argv...)
}

// Acquire is what an acquire asks of a node (see acquire.lua).
type Acquire struct {
	// Keys are the lock keys as stored, followed by the node's state key.
	Keys  []string
	Token string
	TTL   time.Duration // used in whole milliseconds
	// Establish is the id of a guarded node state to end at once, when the
	// round found a new deployment; "" for none.
	Establish string
	// Prev is the token of a lock of the same client handed over to this
	// acquire: keys that hold it count as free. "" for none.
	Prev string
	// Place is the id of the waiter that makes the acquire, when it is to
	// join the first key's queue of waiters if the keys are taken; "" for
	// none (nothing is sent either when the protocol has no queues, see
	// [Protocol.WithQueues]). Ticket orders the waiters of the queue, the
	// same on every node: the time the waiter began, in Unix ms. Waiters
	// of equal tickets are ordered by id.
	Place  string
	Ticket int64
	// Live is the channel of the waiter's client (see [LiveChannel]) when
	// the waiter joins for a handoff on the node, "" when it is only to be
	// named. Then PrevToken is the token of the waiter's previous round, ""
	// for none: its entry in the queue is replaced, and a key handed to it
	// counts as free.
	Live      string
	PrevToken string
	// Queued is set when the waiter may have entries in the queue (its
	// earlier rounds joined it): a grant, or a round that joins, takes them
	// off. A waiter's first round has none, which saves the node a call.
	Queued bool
	// Cleared is set, for a waiter's first round, when the client waited
	// for the key lately but knows that none of its entries is left on any
	// node: the round does not look for them (which saves the node a scan
	// of the queue), and a grant still marks the keys when others are in
	// line. Queued takes precedence.
	Cleared bool
}

// AcquireCmd returns the command for a: ARGV token, ttl and guard, then
// ticket, place, fenced, establish, prev, live, prev token and queued as
// acquire.lua numbers them, each "" when unset, and without the unset
// ones at the end. A node runs about a thousand instructions more per
// argument, so the usual acquire sends three or four.
func (p *Protocol) AcquireCmd(a Acquire) Cmd {
	var opt [8]any // ARGV[4..11]
	if a.Place != "" && p.prefix != nil {
		opt[0] = p.ticketArg(a.Ticket)
		if a.Place != a.Token {
			opt[1] = a.Place
		}
		if a.Live != "" {
			opt[5] = a.Live
			if a.Live == p.live {
				opt[5] = p.live // boxed once
			}
			if a.PrevToken != "" {
				opt[6] = a.PrevToken
			}
		}
		switch {
		case a.Queued:
			opt[7] = "1"
		case a.Cleared:
			opt[7] = "2"
		}
	}
	if p.fencing {
		opt[2] = "1"
	}
	if a.Establish != "" {
		opt[3] = a.Establish
	}
	if a.Prev != "" {
		opt[4] = a.Prev
	}
	n := len(opt)
	for n > 0 && opt[n-1] == nil {
		n--
	}
	cmd := make(Cmd, 0, 3+len(a.Keys)+3+n)
	cmd = append(cmd, "evalsha", p.acquire.sha, len(a.Keys))
	for _, k := range a.Keys {
		cmd = append(cmd, k)
	}
	cmd = append(cmd, a.Token, p.ttlArg(a.TTL), p.guard)
	for _, v := range opt[:n] {
		if v == nil {
			v = p.none
		}
		cmd = append(cmd, v)
	}
	return cmd
}

// ReleaseAfter returns the release of the lock that acq, an acquire's
// command, asked for: its lock keys, its token, and its ttl for the
// tombstones. It shares acq's boxed keys and token. announce publishes
// each deletion on [ReleasedChannel].
func (p *Protocol) ReleaseAfter(acq Cmd, announce bool) Cmd {
	nkeys := acq[2].(int) - 1 // without the state key
	cmd := make(Cmd, 0, 3+nkeys+2)
	cmd = append(cmd, "evalsha", p.release.sha, nkeys)
	cmd = append(cmd, acq[3:3+nkeys]...)
	token, ttl := acq[3+nkeys+1], acq[3+nkeys+2].(int64)
	return append(cmd, token, p.releaseArg(ttl, announce))
}

// ReleaseJoined returns rel, an announced release, for a node that refused
// the lock's acquire but where the acquire joined the key's queue for a
// handoff: without the TTL that makes it leave tombstones (the acquire was
// answered), and with the client's channel, so that it also takes the
// client's entries off the queue and releases what was handed over to the
// round (see release.lua). Without handoffs, or for a release that does
// not announce, it returns rel.
func (p *Protocol) ReleaseJoined(rel Cmd) Cmd {
	if p.live == nil || p.queues == "" || len(rel) != 3+rel[2].(int)+2 {
		return rel
	}
	if how, _ := rel[len(rel)-1].(string); !strings.HasPrefix(how, "1|") {
		return rel
	}
	out := make(Cmd, len(rel), len(rel)+1)
	copy(out, rel)
	out[len(out)-1] = p.releaseArg(0, true)
	return append(out, p.live)
}

// Release returns the release of the lock with token on keys (as stored),
// leaving a tombstone for ttl where a key is missing.
func (p *Protocol) Release(keys []string, token string, ttl time.Duration, announce bool) Cmd {
	return newCmd(p.release, keys, token, p.releaseArg(ttl.Milliseconds(), announce))
}

// ReleaseOwn returns the announced release, on key (as stored), of what a
// handoff may have given the round with token of this client's waiter,
// taking the client's entries off the key's queue (see release.lua): for a
// waiter that leaves. It leaves no tombstone. Without handoffs it is nil.
func (p *Protocol) ReleaseOwn(key, token string) Cmd {
	if p.live == nil {
		return nil
	}
	return newCmd(p.release, []string{key}, token, p.releaseArg(0, true), p.live)
}

// Extend returns the command that sets the TTL of the lock with token on
// keys (the lock keys as stored, then the node's state key) to ttl.
func (p *Protocol) Extend(keys []string, token string, ttl time.Duration) Cmd {
	return newCmd(p.extend, keys, token, p.ttlArg(ttl), p.guard)
}

// Fence returns the write-back of a fenced lock's fence to keys (the lock
// keys as stored, then the node's state key).
func (p *Protocol) Fence(keys []string, token string, fence int64) Cmd {
	return newCmd(p.fence, keys, token, fence)
}

// Processor is the part of a go-redis client that running a command needs.
type Processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// Run sends cmd to node by SHA and returns its reply. When the node does not
// have the script (NOSCRIPT: a restart, SCRIPT FLUSH) it sends the source
// with EVAL, which also loads it.
func (p *Protocol) Run(ctx context.Context, node Processor, cmd Cmd) (any, error) {
	return run(ctx, p, node, cmd, redis.NewCmd)
}

// RunInt is [Protocol.Run] for the scripts whose reply is an integer.
func (p *Protocol) RunInt(ctx context.Context, node Processor, cmd Cmd) (int64, error) {
	return run(ctx, p, node, cmd, redis.NewIntCmd)
}

func run[C interface {
	redis.Cmder
	Result() (V, error)
}, V any](ctx context.Context, p *Protocol, node Processor, cmd Cmd, newCmd func(context.Context, ...any) C) (V, error) {
	c := newCmd(ctx, cmd...)
	err := node.Process(ctx, c)
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		if s, ok := p.scriptOf(cmd[1]); ok {
			eval := make([]any, len(cmd))
			copy(eval, cmd)
			eval[0], eval[1] = "eval", s.src
			c = newCmd(ctx, eval...)
			err = node.Process(ctx, c)
		}
	}
	if err != nil {
		var zero V
		return zero, err
	}
	return c.Result()
}

// Check returns the command that checks a new connection's server against
// the node's state key (as stored): see check.lua and [DecodeCheck].
func (p *Protocol) Check(stateKey string) Cmd {
	return newCmd(p.check, []string{stateKey}, p.guard)
}
