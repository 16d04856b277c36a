package redlock

import (
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

// Holder returns the holder of key that a quorum of nodes agree on. It
// reads every node once, in parallel, and changes nothing. When a quorum
// of nodes agree that the key is free, it returns the zero Holder and nil.
// It returns an [*Error] wrapping [ErrNotHeld] when neither a holder nor
// "free" has a quorum: its holders split the nodes, or too few nodes
// answered.
//
// What it reports may have changed by the time it returns: use it to see
// who holds a lock, never to decide whether to take one.
func (c *Client) Holder(ctx context.Context, key string) (Holder, error) {
	if err := c.checkKeys([]string{key}); err != nil {
		return Holder{}, err
	}
	vals, r, err := c.read(ctx, []string{c.stored(key)})
	if err != nil {
		return Holder{}, err
	}
	h, _, agreed := c.holderOf(vals, 0)
	if !agreed {
		e := c.newError("holder", key, h.Nodes, r, ErrNotHeld, nil)
		e.Reason = "no holder on a quorum of nodes"
		return Holder{}, e
	}
	return h, nil
}

// holderOf returns the holder of the i-th key read, in vals, that a
// quorum of nodes agree on, and its token (the zero Holder and "" when a
// quorum agree that the key is free), or false when neither has a quorum;
// its Nodes are then the most nodes that agree on one holder.
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
// parallel, and changes nothing. It returns an [*Error] wrapping
// [ErrNotHeld] when fewer than a quorum hold the token, or when the lock
// was unlocked or its validity has run out; for a nil Lock, an error
// wrapping ErrNotHeld.
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
	vals, r, err := c.read(ctx, l.held.storedKeys())
	if err != nil {
		return 0, err
	}
	var ttls []time.Duration
	for _, v := range vals {
		if t, ok := heldFor(v, l.token); ok {
			ttls = append(ttls, t)
		}
	}
	if len(ttls) < c.cfg.quorum {
		return 0, c.newError("ttl", l.name(), len(ttls), r, ErrNotHeld, nil)
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

// read reads keys (as stored) on every node at once and returns what each
// node holds, nil for a node that failed (its error is in the round).
func (c *Client) read(ctx context.Context, keys []string) ([][]node.Value, *quorum.Round, error) {
	if err := c.life.enter(); err != nil {
		return nil, nil, err
	}
	defer c.life.exit()
	vals := make([][]node.Value, len(c.nodes))
	r := c.life.workers.Start(ctx, len(c.nodes), c.cfg.nodeTimeout, func(ctx context.Context, i int) error {
		v, err := c.nodes[i].Read(ctx, keys)
		vals[i] = v
		return err
	})
	r.Wait()
	return vals, r, nil
}
