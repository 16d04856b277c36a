package redlock

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redquorum/redquorum/internal/node"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/quorum"
)

// Holder is who holds a key, as a quorum of nodes agree.
type Holder struct {
	Owner string        // the holder's Options.Owner ("" when it named none)
	TTL   time.Duration // how long a quorum of nodes still hold it
	Nodes int           // how many nodes hold it
	Slot  int           // for a semaphore's or a read-write lock's reader, its slot; else 0
}

// Holder returns the holder of key that a quorum of nodes agree on, or the
// zero Holder when a quorum agree that the key is free. It reads every node
// once, in parallel, and changes nothing. The answer may be stale: use it
// to see who holds a lock, never to decide whether to take one.
//
// With no quorum for a holder or for "free", it returns an [*Error]
// wrapping [ErrNotHeld]. Either holders split the nodes, or fewer than a
// quorum answered out of their restart guard (their [NodeResult] wraps
// [ErrGuarded]). A guarded node does not count, nor does one without a
// state unless no node has one (a new deployment).
func (c *Client) Holder(ctx context.Context, key string) (Holder, error) {
	if err := c.checkKeys([]string{key}); err != nil {
		return Holder{}, err
	}
	rd, err := c.read(ctx, []string{c.stored(key)})
	if err != nil {
		return Holder{}, err
	}
	h, _, agreed := c.holderOf(rd.vals, 0)
	if !agreed {
		e := rd.error(c, "holder", key, h.Nodes, ErrNotHeld)
		e.Reason = "no holder on a quorum of nodes"
		return Holder{}, e
	}
	return h, nil
}

// holderOf returns the holder of the i-th key read, in vals, that a
// quorum of nodes agree on, and its token. When a quorum agree that the
// key is free, it returns the zero Holder and "". When neither has a
// quorum, it returns false, with Nodes the most nodes that agree on one
// holder.
func (c *Client) holderOf(vals [][]node.Value, i int) (Holder, string, bool) {
	byToken := map[string][]time.Duration{}
	free := 0
	for _, v := range vals {
		if v == nil {
			continue // no answer
		}
		switch h, _ := protocol.Holding(v[i].Data); {
		case h == "" || strings.HasPrefix(h, protocol.TombstonePrefix):
			free++ // missing, or tombstones that grant nothing
		case v[i].TTL > 0:
			byToken[h] = append(byToken[h], v[i].TTL)
		}
	}
	if free >= c.cfg.quorum {
		return Holder{}, "", true
	}
	best, most := "", 0
	for token, ttls := range byToken {
		if len(ttls) > most {
			best, most = token, len(ttls)
		}
	}
	if most < c.cfg.quorum {
		return Holder{Nodes: most}, "", false
	}
	return Holder{Owner: protocol.Owner(best), TTL: quorumTTL(byToken[best], c.cfg.quorum), Nodes: most}, best, true
}

// TTL returns how long a quorum of nodes still hold this lock's token, at
// most the time left until [Lock.Until]. It reads every node once, in
// parallel, and changes nothing. It counts the nodes as [Client.Holder]
// does. It returns an [*Error] wrapping [ErrNotHeld] when fewer than a
// quorum hold the token, or when the lock was unlocked or its validity has
// run out. For a nil Lock, its error wraps ErrNotHeld too.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	if l == nil {
		return 0, nilLockError("ttl")
	}
	c := l.c
	l.mu.Lock()
	until, released := l.until, l.released
	l.mu.Unlock()
	if left := until.Sub(c.cfg.clock.Now()); released || left <= 0 {
		reason := "already unlocked"
		if !released {
			reason = fmt.Sprintf("validity ran out %v ago", -left.Round(time.Millisecond))
		}
		return 0, &Error{Op: "ttl", Key: l.name(), Quorum: c.cfg.quorum, Reason: reason, sentinel: ErrNotHeld}
	}
	rd, err := c.read(ctx, l.held.storedKeys())
	if err != nil {
		return 0, err
	}
	var ttls []time.Duration
	for _, v := range rd.vals {
		if t, ok := heldFor(v, l.token); ok {
			ttls = append(ttls, t)
		}
	}
	if len(ttls) < c.cfg.quorum {
		return 0, rd.error(c, "ttl", l.name(), len(ttls), ErrNotHeld)
	}
	return min(quorumTTL(ttls, c.cfg.quorum), until.Sub(c.cfg.clock.Now())), nil
}

// heldFor reports how long a node that holds vals still holds token on
// every key, and whether it does.
func heldFor(vals []node.Value, token string) (time.Duration, bool) {
	if vals == nil {
		return 0, false
	}
	left := time.Duration(-1)
	for _, v := range vals {
		if h, _ := protocol.Holding(v.Data); h != token || v.TTL <= 0 {
			return 0, false
		}
		if left < 0 || v.TTL < left {
			left = v.TTL
		}
	}
	return left, true
}

// quorumTTL returns how long a quorum of the nodes whose TTLs are ttls
// still hold a key: the quorum-th longest. len(ttls) ≥ q.
func quorumTTL(ttls []time.Duration, q int) time.Duration {
	slices.Sort(ttls)
	return ttls[len(ttls)-q]
}

// reading is what read found on every node.
type reading struct {
	// vals holds, per node, what it holds at the keys read; nil for a node
	// that failed or that is not counted for its restart guard.
	vals [][]node.Value
	r    *quorum.Round // the reads; a node's outcome is its failure
	// guarded holds, per node, the guardError of a node not counted for
	// its restart guard, else nil.
	guarded []error
}

// read reads keys (as stored) on every node at once. A node in its restart
// guard is not counted: it may lack keys it granted, or hold keys of
// holders that left since. Nor is a node without a state, unless every
// node answered without one: a new deployment, whose nodes hold nothing
// of anyone.
func (c *Client) read(ctx context.Context, keys []string) (reading, error) {
	if err := c.life.enter(); err != nil {
		return reading{}, err
	}
	defer c.life.exit()
	state := ""
	if c.cfg.guard > 0 {
		state = c.stateKey
	}
	rd := reading{vals: make([][]node.Value, len(c.nodes)), guarded: make([]error, len(c.nodes))}
	guards := make([]node.Guard, len(c.nodes))
	rd.r = c.life.workers.Start(ctx, len(c.nodes), c.cfg.nodeTimeout, func(ctx context.Context, i int) error {
		v, g, err := c.nodes[i].Read(ctx, keys, state)
		rd.vals[i], guards[i] = v, g
		return err
	})
	rd.r.Wait()
	fresh := true // every node answered without a state
	for i := range c.nodes {
		if res, _ := rd.r.Result(i); res != nil || !guards[i].NoState {
			fresh = false
		}
	}
	for i, g := range guards {
		if g.On && !(g.NoState && fresh) {
			rd.vals[i] = nil
			rd.guarded[i] = &guardError{left: cmp.Or(g.Left, c.cfg.guard)}
		}
	}
	return rd, nil
}

// error returns the Error of op on key, decided by ok nodes, from rd.
func (rd reading) error(c *Client, op, key string, ok int, sentinel error) *Error {
	e := c.newError(op, key, ok, rd.r, sentinel, nil)
	for i, g := range rd.guarded {
		if g != nil {
			e.Nodes[i].Err = g
		}
	}
	return e
}
