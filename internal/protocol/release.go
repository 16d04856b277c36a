package protocol

import (
	"slices"
	"time"
)

// Release is what a release asks of a node (see release.lua): delete the
// keys that hold Token.
type Release struct {
	Keys  []string // the lock keys as stored
	Token string
	// TTL is how long the tombstones live that it leaves where a key is
	// missing; 0 for none.
	TTL time.Duration
	// Announce tells the waiters of the keys, as the waiting strategy does.
	Announce bool
	// Clean, with Announce, is the clean-up of a failed round: where waiters
	// are in line (InLine, Handoff), a key they wait for is announced,
	// naming the first of them, but not handed off. Where the round took a
	// key over (one handed off to its waiter's previous round), this tells
	// the line that the key is free, which would otherwise learn it only
	// from its timers. The Announce strategy, which names nobody and would
	// wake every waiter, announces no clean-up.
	Clean bool
	// Place (the InLine strategy) is a waiter's id whose entry leaves the
	// first key's line.
	Place string
	// Leave (the Handoff strategy) also takes the client's entries off the
	// first key's line, and releases what was handed off to Token there.
	Leave bool
}

// nameOnly is the Handoff strategy's release argument of a clean-up (see
// Release.Clean).
const nameOnly = "n"

// Release returns the command for r.
func (p *Protocol) Release(r Release) Cmd {
	cmd := make(Cmd, 0, 3+len(r.Keys)+5)
	cmd = append(cmd, "evalsha", p.release.sha, len(r.Keys))
	for _, k := range r.Keys {
		cmd = append(cmd, k)
	}
	return p.releaseArgs(cmd, r.Token, p.ttlArg(r.TTL), r)
}

// WithoutTombstones returns a copy of rel, a release's command, that
// leaves no tombstone (its ttl 0). rel is not changed.
func WithoutTombstones(rel Cmd) Cmd {
	c := slices.Clone(rel)
	c[3+c[2].(int)+1] = int64(0)
	return c
}

// ReleaseAfter returns r, the release of the lock that acq, an acquire's
// command, asked for. It shares acq's boxed keys, token and ttl, so r's
// Keys, Token and TTL are not read.
func (p *Protocol) ReleaseAfter(acq Cmd, r Release) Cmd {
	all := acq[2].(int)
	nkeys := all - 1 - p.layerKeys(acq) // without the state key and the layer's keys
	cmd := make(Cmd, 0, 3+nkeys+5)
	cmd = append(cmd, "evalsha", p.release.sha, nkeys)
	cmd = append(cmd, acq[3:3+nkeys]...)
	return p.releaseArgs(cmd, acq[3+all], acq[3+all+1], r)
}

// releaseArgs appends the arguments of r to cmd: token, then ttl for its
// tombstones (0 for none). An announced release then gets the strategy's
// arguments, first the state key. For InLine, the place that leaves the line
// follows. For Handoff, the client's channel to leave follows, then "n" for
// a clean-up, which hands nothing off, or "1" when the restart guard is off.
func (p *Protocol) releaseArgs(cmd Cmd, token, ttl any, r Release) Cmd {
	cmd = append(cmd, token, ttl)
	if !r.Announce || p.strategy == Kernel || r.Clean && p.strategy == Announce {
		return cmd
	}
	cmd = append(cmd, p.state)
	if p.strategy == InLine && r.Place != "" {
		return append(cmd, r.Place)
	}
	if p.strategy != Handoff {
		return cmd
	}
	leave := p.none
	if r.Leave && p.handChannel != nil {
		leave = p.handChannel
	}
	if r.Clean {
		return append(cmd, leave, nameOnly)
	}
	if p.guard.(int64) == 0 {
		return append(cmd, leave, "1")
	}
	if leave != p.none {
		cmd = append(cmd, leave)
	}
	return cmd
}
