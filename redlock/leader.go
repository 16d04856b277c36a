package redlock

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redquorum/redquorum/internal/node"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/retry"
	"github.com/redquorum/redquorum/internal/wake"
)

// Leader returns the election's leader as a quorum of nodes agree: each
// holds the leader's lock and the record it wrote. It reads every node
// once and changes nothing; guarded nodes do not count.
//
// When no quorum agrees, its [*Error] wraps [ErrNoLeader] only if nobody
// can hold the lock on a quorum. Otherwise who leads is unknown (see
// docs/DESIGN.md, "Elections"). A bad name gives an error naming it. The
// answer may be stale: a leader learns that it leads from its
// [Leadership], never from Leader.
func (e *Election) Leader(ctx context.Context) (LeaderInfo, error) {
	if err := e.check(); err != nil {
		return LeaderInfo{}, err
	}
	c := e.c
	rd, err := c.read(ctx, e.keys())
	if err != nil {
		return LeaderInfo{}, err
	}
	vals := rd.vals
	answered := 0
	type vouch struct {
		rec protocol.Record
		ttl time.Duration
	}
	byToken := map[string][]vouch{}
	holding := map[string]int{} // nodes that hold each token's lock
	for _, v := range vals {
		if v == nil {
			continue
		}
		answered++
		if h, ok := holds(v[0]); ok {
			holding[h]++
		}
		if rec, ok := vouches(v); ok {
			byToken[rec.Token] = append(byToken[rec.Token], vouch{rec, v[0].TTL})
		}
	}
	var best []vouch
	for _, vs := range byToken {
		if len(vs) > len(best) {
			best = vs
		}
	}
	if len(best) < c.cfg.quorum {
		return LeaderInfo{}, rd.error(c, "leader", e.name, len(best), c.noLeader(answered, len(vals), holding))
	}
	// The leader's latest value that a node holds: a Proclaim reaches the
	// nodes one by one.
	rec := best[0].rec
	ttls := make([]time.Duration, len(best))
	for i, v := range best {
		if v.rec.Rev > rec.Rev {
			rec = v.rec
		}
		ttls[i] = v.ttl
	}
	return LeaderInfo{Value: rec.Value, Term: rec.Term, Owner: protocol.Owner(rec.Token), TTL: quorumTTL(ttls, c.cfg.quorum)}, nil
}

// noLeader is the sentinel of Leader's error when fewer than a quorum vouch
// for one leader, of n nodes of which answered answered out of their guard,
// holding counting the nodes that hold each token's lock.
func (c *Client) noLeader(answered, n int, holding map[string]int) error {
	held := 0
	for _, h := range holding {
		held = max(held, h)
	}
	switch {
	case answered < c.cfg.quorum:
		return errLeaderUnknown
	case held+n-answered >= c.cfg.quorum:
		return errLeaderUnshown
	}
	return ErrNoLeader
}

// errLeaderUnknown is Leader's error when too few nodes answered out of
// their restart guard.
var errLeaderUnknown = errors.New("redlock: leader unknown: too few nodes answered out of their restart guard")

// errLeaderUnshown is Leader's error when a candidate's lock may be on a
// quorum of the nodes but its record is on too few of them.
var errLeaderUnshown = errors.New("redlock: leader unknown: a candidate's lock may be on a quorum of the nodes, and too few of them show its record")

// holds returns the token whose lock v, the election's lock key on a node,
// holds with a positive TTL, if any: a key that holds only tombstones is
// free.
func holds(v node.Value) (string, bool) {
	h, _ := protocol.Holding(v.Data)
	if h == "" || v.TTL <= 0 || strings.HasPrefix(h, protocol.TombstonePrefix) {
		return "", false
	}
	return h, true
}

// vouches returns the record that a node holding v (the election's lock
// key, then its record key) vouches for: one whose token the lock key
// holds.
func vouches(v []node.Value) (protocol.Record, bool) {
	rec, ok := protocol.ParseRecord(v[1].Data)
	if h, held := holds(v[0]); !ok || !held || h != rec.Token {
		return protocol.Record{}, false
	}
	return rec, true
}

// observeRecheck is how long Observe waits without an announcement before
// it reads the nodes again while nobody leads: an announcement may be
// lost (a subscription not yet in place, a connection broken).
const observeRecheck = 5 * time.Second

// Observe returns a channel that receives the election's leader, as
// [Election.Leader] reports it, then every change of leader, term or value.
// The zero LeaderInfo means that nobody leads. The channel is closed when
// ctx ends or the Client is closed, and at once for a bad name.
//
// A change comes as soon as the nodes announce it. A leader whose process
// died is reported gone within one TTL. While who leads is unknown, Observe
// reports nothing and reads again (docs/DESIGN.md, "Elections"). Receive
// promptly: until you do, Observe keeps the latest change and reads no more.
func (e *Election) Observe(ctx context.Context) <-chan LeaderInfo {
	ch := make(chan LeaderInfo)
	if e.check() != nil {
		close(ch)
		return ch
	}
	go e.observe(ctx, ch)
	return ch
}

// observe is Observe's goroutine.
func (e *Election) observe(ctx context.Context, ch chan<- LeaderInfo) {
	defer close(ch)
	c := e.c
	wk := c.waker()
	key := e.keys()[1]
	var last LeaderInfo
	first, failures := true, 0
	for {
		since := c.cfg.clock.Now()
		info, err := e.Leader(ctx)
		wait := observeRecheck
		switch {
		case err == nil || errors.Is(err, ErrNoLeader):
			failures = 0
			if info.Term != 0 {
				// Read again once the lock would have expired on a
				// quorum: an extension moves it, a loss shows.
				wait = info.TTL + c.cfg.minRetry
			}
			if first || !sameLeader(info, last) {
				select {
				case ch <- info:
				case <-ctx.Done():
					return
				}
				first, last = false, info
			}
		case errors.Is(err, ErrClosed) || ctx.Err() != nil:
			return
		default:
			wait = retry.Delay(failures, c.cfg.minRetry, c.cfg.maxRetry)
			failures++
		}
		if !e.sleep(ctx, wk, key, since, wait) {
			return
		}
	}
}

// sleep waits for d, or for an announcement on the election's record key
// heard after since. It returns false when ctx ended or the Client closed.
func (e *Election) sleep(ctx context.Context, wk *wake.Waker, key string, since time.Time, d time.Duration) bool {
	var woken <-chan struct{}
	if wt := wk.Listen(key, since); wt != nil {
		defer wt.Close()
		woken = wt.C()
	}
	select {
	case <-woken:
	case <-e.c.cfg.clock.After(d):
	case <-ctx.Done():
		return false
	case <-e.c.life.closing:
		return false
	}
	return true
}

// sameLeader reports whether a and b show the same leader, term and value.
func sameLeader(a, b LeaderInfo) bool {
	return a.Term == b.Term && a.Value == b.Value && a.Owner == b.Owner
}
