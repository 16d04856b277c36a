package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/redlock"
)

// strategyNames names the scripts' strategies as Options.Waiting does.
var strategyNames = map[protocol.Strategy]string{protocol.Announce: "WaitBackoff", protocol.InLine: "WaitInLine", protocol.Handoff: "WaitHandoff"}

// count is one line of contendedInstructions: instructions per operation.
type count struct {
	name string
	per  float64
}

// contendedInstructions returns the instructions one redis-server runs
// for the scripts of a hot key that the uncontended lock+unlock never
// runs, over n of each, as a client waiting with strategy st sends them
// (internal/protocol), with waiters waiters of as many clients in the
// key's line (7 for the figures in bench/README.md; --line-waiters):
//
//   - a waiter's later round, refused while another token holds the key
//     (the waiters taking turns): with WaitInLine and
//     WaitHandoff it joins the key's line, replacing its waiter's previous
//     entry;
//   - with WaitInLine and WaitHandoff, a waiter's first round, which joins
//     too; with WaitHandoff, both as the round of a client that may have
//     entries left (protocol.MayHave), which looks for them, and as that
//     of a client that knows it has none (protocol.Cleared). Each waiter's
//     previous entry is taken off before its next first round, as the
//     release that named or handed off to it did, by a ZREM that every
//     first-round figure counts;
//   - an unlock's release of the key that a waiter marked, announced: it
//     hands the key off (WaitHandoff), names the first in line
//     (WaitInLine) or names nobody (WaitBackoff). Each is counted with
//     the SET and ZADD that put the lock and a waiter back before it, and
//     the GET that checks it after, the same for every strategy;
//   - with WaitHandoff, the release with which a waiter that obtained the
//     lock, or gave up, leaves the line for each of its earlier rounds
//     (protocol.Release.Leave, see handWait.done), which takes its
//     client's entries off the line and finds the key held by another.
func contendedInstructions(ctx context.Context, dir string, n, waiters int, st protocol.Strategy) ([]count, error) {
	type join struct {
		name                      string
		first, cleared, pipelined bool
	}
	var joins []join
	release := "a release that hands the key off"
	switch st {
	case protocol.Handoff:
		joins = []join{{"a waiter's round that joins the line for a handoff", false, false, false},
			{"a waiter's first round that joins, looking for old entries", true, false, false},
			{"a waiter's first round that joins, its client cleared", true, true, false},
			{"the same as the pipelined join (MULTI, no script)", true, true, true}}
	case protocol.InLine:
		joins = []join{{"a waiter's round that joins the line", false, false, false}, {"a waiter's first round that joins the line", true, false, false}}
		release = "a release that names the first in line"
	default:
		joins = []join{{"a waiter's round refused (the key marked)", false, false, false}}
		release = "a release announced to the waiters"
	}
	var counts []count
	for _, j := range joins {
		per, err := joinInstructions(ctx, dir, n, waiters, st, j.first, j.cleared, j.pipelined)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", j.name, err)
		}
		counts = append(counts, count{j.name, per})
	}
	for _, tombs := range []int{0, protocol.MaxTombstones} {
		name := release
		if tombs > 0 {
			name = fmt.Sprintf("%s, the key keeping %d tombstones", release, tombs)
		}
		per, err := releaseInstructions(ctx, dir, n, waiters, st, tombs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		counts = append(counts, count{name, per})
	}
	if st == protocol.Handoff {
		const leave = "a waiter's release that leaves the line (Leave)"
		per, err := leaveInstructions(ctx, dir, n, waiters)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", leave, err)
		}
		counts = append(counts, count{leave, per})
	}
	return counts, nil
}

// joinInstructions counts the refused rounds of contendedInstructions:
// later rounds, or first rounds (of a client that may have entries left
// unless cleared), of waiters waiters taking turns.
func joinInstructions(ctx context.Context, dir string, n, waiters int, st protocol.Strategy, first, cleared, pipelined bool) (float64, error) {
	name := fmt.Sprintf("join-%s-%v-%v-%v-%d", strategyNames[st], first, cleared, pipelined, waiters)
	return underCallgrind(ctx, dir, name, n, func(addr string) (func(string, int) error, func(), error) {
		c := redis.NewClient(redlock.NodeOptions(addr))
		if err := c.HSet(ctx, protocol.StateKey, "g", "0").Err(); err != nil {
			return nil, nil, err
		}
		holder := "holder"
		if pipelined {
			holder = protocol.WaitedPrefix + holder // marked, as a script's join leaves it
		}
		if err := c.Set(ctx, "hot", holder, time.Hour).Err(); err != nil {
			return nil, nil, err
		}
		ps := make([]*protocol.Protocol, waiters)
		ids, prev, entries := make([]string, waiters), make([]string, waiters), make([]string, waiters)
		for w := range ps {
			ps[w] = protocol.New(redlock.DefaultRestartGuard, false, st, "")
			if st == protocol.Handoff {
				ps[w].WithHandChannel(protocol.HandChannel + strconv.Itoa(w))
			}
			ids[w] = protocol.NewToken("bench") // a waiter's id is as long as its rounds' tokens
		}
		return func(_ string, i int) error {
			w := i % waiters
			token := protocol.NewToken("bench")
			j := protocol.Join{Place: ids[w], Ticket: int64(w), Entries: protocol.MayHave}
			if st == protocol.Handoff {
				j.Channel, j.Prev = protocol.HandChannel+strconv.Itoa(w), prev[w]
			}
			if first {
				if entries[w] != "" {
					if err := c.ZRem(ctx, protocol.LinePrefix+"hot", entries[w]).Err(); err != nil {
						return err
					}
				}
				j.Place, j.Prev, j.Entries, entries[w] = token, "", protocol.NoWait, token
				switch {
				case st == protocol.Handoff && cleared:
					j.Entries = protocol.Cleared
				case st == protocol.Handoff:
					j.Entries = protocol.MayHave
				}
				if st == protocol.Handoff {
					entries[w] = token + "|" + token + "|10000|" + j.Channel
				}
			}
			a := protocol.Acquire{Keys: []string{"hot", protocol.StateKey}, Token: token, TTL: 10 * time.Second, Join: j}
			if pipelined {
				jc := ps[w].NewJoin(ctx, &a)
				_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
					for _, cmd := range jc.Cmds() {
						_ = p.Process(ctx, cmd)
					}
					return nil
				})
				reply, joined, _, err := jc.Reply()
				ps[w].PutJoin(jc)
				if err != nil || !joined || reply.Kind != protocol.Taken {
					return fmt.Errorf("pipelined join: %v, %v, %v", reply, joined, err)
				}
				prev[w] = token
				return nil
			}
			r, err := ps[w].Run(ctx, c, ps[w].AcquireCmd(a))
			if err != nil {
				return err
			}
			if reply, err := protocol.DecodeAcquire(r); err != nil || reply.Kind != protocol.Taken {
				return fmt.Errorf("join round: %v, %v", reply, err)
			}
			prev[w] = token
			return nil
		}, func() { _ = c.Close() }, nil
	})
}

// releaseInstructions counts the announced releases of
// contendedInstructions, with waiters-1 other waiters behind the one
// that each release names or hands the key off to, the key keeping tombs
// tombstones (tombstone.lua) that expire in an hour, which a handoff keeps.
func releaseInstructions(ctx context.Context, dir string, n, waiters int, st protocol.Strategy, tombs int) (float64, error) {
	return underCallgrind(ctx, dir, fmt.Sprintf("release-%s-%d-%d", strategyNames[st], waiters, tombs), n, func(addr string) (func(string, int) error, func(), error) {
		c := redis.NewClient(redlock.NodeOptions(addr))
		if err := c.HSet(ctx, protocol.StateKey, "g", "0").Err(); err != nil {
			return nil, nil, err
		}
		now, err := c.Time(ctx).Result()
		if err != nil {
			return nil, nil, err
		}
		var tail string
		for i := range tombs {
			tail += fmt.Sprintf("\n%sgone%d\t%d", protocol.TombstonePrefix, i, now.Add(time.Hour).UnixMilli())
		}
		if err := fillLine(ctx, c, st, waiters-1); err != nil {
			return nil, nil, err
		}
		// The waiter's client: it listens on its own channel for a
		// handoff, which needs it, and otherwise for the announcement.
		id, token, live := protocol.NewToken("bench"), protocol.NewToken("bench"), protocol.HandChannel+"waiter"
		entry, channel := id, protocol.ReleasedChannel+"hot"
		if st == protocol.Handoff {
			entry, channel = id+"|"+token+"|10000|"+live, live
		}
		sub := c.Subscribe(ctx, channel)
		if _, err := sub.Receive(ctx); err != nil {
			return nil, nil, err
		}
		p := protocol.New(redlock.DefaultRestartGuard, false, st, "")
		return func(string, int) error {
			if err := c.Set(ctx, "hot", protocol.WaitedPrefix+"holder"+tail, time.Hour).Err(); err != nil {
				return err
			}
			if err := c.ZAdd(ctx, protocol.LinePrefix+"hot", redis.Z{Score: 1, Member: entry}).Err(); err != nil {
				return err
			}
			v, err := p.RunInt(ctx, c, p.Release(protocol.Release{Keys: []string{"hot"}, Token: "holder", TTL: 10 * time.Second, Announce: true}))
			if err != nil {
				return err
			}
			left, err := c.Get(ctx, "hot").Result()
			if errors.Is(err, redis.Nil) {
				left, err = "", nil
			}
			want := tail[min(1, len(tail)):] // the tombstones alone: the first without its '\n'
			if tombs == 1 {
				want = protocol.TombstonePrefix + "gone0" // the form of a lone tombstone
			}
			if st == protocol.Handoff {
				want = protocol.WaitedPrefix + protocol.HandPrefix + token + tail
			}
			if err == nil && (v != 1 || left != want) {
				err = fmt.Errorf("release: %d, key %q, want 1 and %q", v, left, want)
			}
			return err
		}, func() { _ = sub.Close(); _ = c.Close() }, nil
	})
}

// fillLine puts others waiters, of as many other clients, in the hot
// key's line behind the one a test puts first (score 1), in the form of
// the entries of strategy st.
func fillLine(ctx context.Context, c *redis.Client, st protocol.Strategy, others int) error {
	if others <= 0 {
		return nil
	}
	zs := make([]redis.Z, others)
	for w := range zs {
		id := protocol.NewToken("bench")
		entry := id
		if st == protocol.Handoff {
			entry = id + "|" + protocol.NewToken("bench") + "|10000|" + protocol.HandChannel + "other" + strconv.Itoa(w)
		}
		zs[w] = redis.Z{Score: float64(2 + w), Member: entry}
	}
	return c.ZAdd(ctx, protocol.LinePrefix+"hot", zs...).Err()
}

// leaveInstructions counts the releases with which a waiter leaves the
// hot key's line (protocol.Release.Leave, as handWait.done sends one for
// each of its earlier rounds), while another token holds the key and
// waiters-1 waiters of other clients are in line: each takes the
// waiter's entry (put back before it) off the line.
func leaveInstructions(ctx context.Context, dir string, n, waiters int) (float64, error) {
	return underCallgrind(ctx, dir, fmt.Sprintf("leave-%d", waiters), n, func(addr string) (func(string, int) error, func(), error) {
		c := redis.NewClient(redlock.NodeOptions(addr))
		if err := c.HSet(ctx, protocol.StateKey, "g", "0").Err(); err != nil {
			return nil, nil, err
		}
		if err := c.Set(ctx, "hot", protocol.WaitedPrefix+"holder", time.Hour).Err(); err != nil {
			return nil, nil, err
		}
		if err := fillLine(ctx, c, protocol.Handoff, waiters-1); err != nil {
			return nil, nil, err
		}
		channel := protocol.HandChannel + "waiter"
		p := protocol.New(redlock.DefaultRestartGuard, false, protocol.Handoff, "")
		p.WithHandChannel(channel)
		id := protocol.NewToken("bench")
		return func(string, int) error {
			token := protocol.NewToken("bench")
			entry := id + "|" + token + "|10000|" + channel
			if err := c.ZAdd(ctx, protocol.LinePrefix+"hot", redis.Z{Score: float64(waiters + 1), Member: entry}).Err(); err != nil {
				return err
			}
			v, err := p.RunInt(ctx, c, p.Release(protocol.Release{Keys: []string{"hot"}, Token: token, Announce: true, Leave: true}))
			if err != nil {
				return err
			}
			if v != 0 {
				return fmt.Errorf("leave: %d, want 0 (the key is another's)", v)
			}
			left, err := c.ZScore(ctx, protocol.LinePrefix+"hot", entry).Result()
			if !errors.Is(err, redis.Nil) {
				return fmt.Errorf("leave: the entry is still in line (%v, %v)", left, err)
			}
			return nil
		}, func() { _ = c.Close() }, nil
	})
}
