package protocol

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
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
	// Shortcut is the new-deployment shortcut's request for the node's
	// guarded state; the zero value for none.
	Shortcut Shortcut
	// Handover is the token of the lock that Unlock handed over to this
	// round's caller, whose keys the acquire takes: keys that hold it count
	// as free. "" for none.
	Handover string
	// Join is the waiting strategy's part, for a round of a waiter.
	Join Join
	// Layer is the limit layer's part, for a round of a semaphore or a
	// read-write lock; zero for a lock.
	Layer Layer
}

// Shortcut is one node's part of a round of the new-deployment shortcut
// (see acquire.lua and docs/SAFETY.md, "The new-deployment shortcut").
// With Establish false, it marks the node's guarded state with Mark, if the
// state still has the id ID. With Establish true, it ends the node's guard
// if the state has the id ID and carries Mark.
type Shortcut struct {
	ID        string
	Mark      string // [StateMark] of the ids seen
	Establish bool
}

// arg returns s as acquire.lua reads it: "m" or "e", the mark, the id.
func (s Shortcut) arg() string {
	op := "m"
	if s.Establish {
		op = "e"
	}
	return op + s.Mark + s.ID
}

// StateMark returns the mark of the state ids that a round saw on the
// nodes, one per node in any order. The mark is 32 hex digits of the SHA-256
// of the sorted ids, repeats kept. So every client that sees the same ids
// computes the same mark. A node's new state, whose id no node had before,
// changes it.
func StateMark(ids []string) string {
	s := slices.Clone(ids)
	slices.Sort(s)
	sum := sha256.Sum256([]byte(strings.Join(s, "\n")))
	return hex.EncodeToString(sum[:16])
}

// Join is what a waiter's round tells the waiting strategy on the node
// (see inline.lua and handoff.lua). The zero Join is a round that does not
// wait. The Kernel and Announce strategies send none of it.
type Join struct {
	// Place is the waiter's id, to join the first key's line of waiters if
	// the keys are taken; "" for none. Ticket orders the line, the same on
	// every node: when the waiter began, in Unix ms. Waiters of equal
	// tickets are ordered by entry.
	Place  string
	Ticket int64
	// Entries is what the client knows of its entries in the line.
	Entries Entries
	// Channel is the client's hand channel (see [HandChannel]) when the
	// waiter joins for a handoff on the node (the Handoff strategy), ""
	// when it is only to be named. Prev is then the token of the waiter's
	// previous round, "" for none: its entry is replaced, and a key handed
	// off to it counts as free.
	Channel, Prev string
}

// Entries is what a client knows of its entries in a key's line of
// waiters on the nodes.
type Entries uint8

const (
	// NoWait: the client did not wait for the key lately. A round leaves
	// the line alone, which saves an uncontended lock the calls.
	NoWait Entries = iota
	// MayHave: the client may have entries, because its waiter's earlier
	// rounds joined or it waited for the key lately. A round that joins, or
	// is granted, takes them off first.
	MayHave
	// Cleared: the client waited for the key lately but has no entry left
	// on any node. A grant still marks the keys when others are in line.
	Cleared
)

// AcquireCmd returns the command for a. Its ARGV are the token, ttl and
// guard, then the strategy's arguments for a round that joins, then the
// shortcut and over. Each is "" when unset, and the unset ones at the end are
// left out. A node runs about a thousand instructions more per argument, so
// the usual acquire sends three or four.
func (p *Protocol) AcquireCmd(a Acquire) Cmd {
	var opt [7]any // ARGV[4..]: up to five of the strategy's, then two of the kernel's
	n := 0
	if j := a.Join; j.Place != "" && p.argc > 0 {
		opt[0] = p.ticketArg(j.Ticket)
		if j.Place != a.Token {
			opt[1] = j.Place
		}
		opt[2] = [...]any{nil, "1", "2"}[j.Entries]
		if j.Channel != "" && p.argc >= 5 {
			opt[3] = j.Channel
			if j.Channel == p.handChannel {
				opt[3] = p.handChannel // boxed once
			}
			if j.Prev != "" {
				opt[4] = j.Prev
			}
		}
	}
	if a.Shortcut.ID != "" {
		opt[p.argc] = a.Shortcut.arg()
	}
	if a.Handover != "" {
		opt[p.argc+1] = a.Handover
	}
	for i, v := range opt {
		if v != nil {
			n = i + 1
		}
	}
	l := a.Layer
	cmd := make(Cmd, 0, 3+len(a.Keys)+len(l.Keys)+5+n)
	sha := p.acquire.sha
	if l.Role != NoLayer {
		sha = p.layerScript(l.Role).sha
	}
	cmd = append(cmd, "evalsha", sha, len(a.Keys)+len(l.Keys))
	for _, k := range a.Keys {
		cmd = append(cmd, k)
	}
	for _, k := range l.Keys {
		cmd = append(cmd, k)
	}
	cmd = append(cmd, a.Token, p.ttlArg(a.TTL), p.guard)
	for _, v := range opt[:n] {
		if v == nil {
			v = p.none
		}
		cmd = append(cmd, v)
	}
	if l.Role != NoLayer {
		cmd = appendLayerArgs(cmd, l)
	}
	return cmd
}

// Extend returns the command that sets the TTL of the lock with token on
// keys to ttl. keys are the lock keys as stored, then the node's state key.
func (p *Protocol) Extend(keys []string, token string, ttl time.Duration) Cmd {
	return newCmd(p.extend, keys, token, p.ttlArg(ttl), p.guard)
}

// ExtendIn is [Protocol.Extend] for a lock of the limit layer l (see
// layer.lua). It also keeps l's limit record on the node for ttl. A
// Writer's extend is the kernel's alone, since the record need only
// outlive the reader slots.
func (p *Protocol) ExtendIn(l Layer, keys []string, token string, ttl time.Duration) Cmd {
	if l.Role == NoLayer || l.Role == Writer {
		return p.Extend(keys, token, ttl)
	}
	cmd := make(Cmd, 0, 3+len(keys)+1+4)
	cmd = append(cmd, "evalsha", p.limitExtend.sha, len(keys)+1)
	for _, k := range keys {
		cmd = append(cmd, k)
	}
	return append(cmd, l.Keys[len(l.Keys)-1], token, p.ttlArg(ttl), p.guard, l.Limit)
}

// Fence returns the write-back of a fenced lock's fence to keys (the lock
// keys as stored, then the node's state key).
func (p *Protocol) Fence(keys []string, token string, fence int64) Cmd {
	return newCmd(p.fence, keys, token, fence)
}

// Elect returns the command that writes record, an election's record, to
// keys if the lock key holds token (see elect.lua). keys are the election's
// lock key and record key, as stored. When record is "", the command
// withdraws token's record instead. announce publishes the change to the
// record's observers.
func (p *Protocol) Elect(keys []string, token, record string, announce bool) Cmd {
	a := "0"
	if announce {
		a = "1"
	}
	return newCmd(p.elect, keys, token, record, a)
}

// Processor is the part of a go-redis client that running a command needs.
type Processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// Run sends cmd to node by SHA and returns its reply. When the node does not
// have the script (NOSCRIPT: a restart, SCRIPT FLUSH), Run sends the source
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
// the node's state key (as stored): see check.lua and [DecodeCheck]. It
// carries the script's source (see [Protocol.WithSource]). It runs once per
// connection, and the first connection to a server that has just started
// would otherwise pay a NOSCRIPT round trip.
func (p *Protocol) Check(stateKey string) Cmd {
	return p.WithSource(newCmd(p.check, []string{stateKey}, p.guard))
}

// WithSource returns cmd as an EVAL that carries its script's source, for
// a server that may not have loaded the script. This spares the round trip
// of a NOSCRIPT answer and the EVAL after it. A cmd that is not one of p's
// scripts is returned as it is. cmd itself is not modified.
func (p *Protocol) WithSource(cmd Cmd) Cmd {
	s, ok := p.scriptOf(cmd[1])
	if !ok || cmd[0] != "evalsha" {
		return cmd
	}
	eval := slices.Clone(cmd)
	eval[0], eval[1] = "eval", s.src
	return eval
}

// Record is an election's record as its leader publishes it (see
// elect.lua).
type Record struct {
	Term  uint64 // the leader's lock's fence
	Rev   uint64 // counts the leader's writes of a value, from 1
	Token string // the leader's lock's token
	Value string
}

// String returns r as stored: "term\nrev\ntoken\nvalue".
func (r Record) String() string {
	return strconv.FormatUint(r.Term, 10) + "\n" + strconv.FormatUint(r.Rev, 10) + "\n" + r.Token + "\n" + r.Value
}

// ParseRecord returns the record that s, read from a record key, holds,
// and false when s is not one (a missing key reads as "").
func ParseRecord(s string) (Record, bool) {
	parts := strings.SplitN(s, "\n", 4)
	if len(parts) != 4 {
		return Record{}, false
	}
	term, err1 := strconv.ParseUint(parts[0], 10, 64)
	rev, err2 := strconv.ParseUint(parts[1], 10, 64)
	if err1 != nil || err2 != nil || parts[2] == "" {
		return Record{}, false
	}
	return Record{Term: term, Rev: rev, Token: parts[2], Value: parts[3]}, true
}
