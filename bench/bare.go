package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/retry"
	"github.com/redquorum/redquorum/locktest/loadtest"
	"github.com/redquorum/redquorum/quorum"
	"github.com/redquorum/redquorum/redlock"
)

// The bare implementations are not locks. They measure the floor under
// redquorum's figures: two quorum rounds per lock+unlock, on the same node
// clients (redlock.NewNodes) and the same round machinery (quorum.Workers,
// returning at a majority), without anything else of redlock.Client (no
// local queue, slots, batching, retries, validity, error reports):
//
//   - bare-scripts sends the real acquire and release scripts, with the
//     arguments a Lock with the default options sends: the gap between it and
//     redquorum is the Client's own cost;
//   - bare-min sends the least that a lock with a restart guard needs: an
//     acquire script that reads the node's guard and sets the key (HGET,
//     SET NX PX), and a token-guarded release script (GET, DEL), without
//     tombstones, lines or announcements: the floor of any protocol that
//     checks the guard on the node, and the gap between it and
//     bare-scripts is what redquorum's other features cost the nodes;
//   - bare-pipe takes the key without a script: SET NX PX GET and the
//     guard's HGET, pipelined in one write, then redquorum's release: what
//     an acquire would cost if it were two commands instead of a script
//     (fewer instructions on the node, but two replies to read);
//   - bare-noop sends a script that only returns 0: the gap between it and
//     bare-scripts is what the scripts cost the nodes.
//
// They never wait for a key: use them only in the 1-caller scenario
// (--only distinct-1), where no two rounds share a key. Their calls time
// out after timeout.
func bareImpl(name string, kind bareKind, timeout time.Duration) loadtest.Impl {
	return loadtest.Impl{Name: name, New: func(addrs []string) (loadtest.Locker, func(), error) {
		nodes := redlock.NewNodes(addrs...)
		closeNodes := func() {
			for _, n := range nodes {
				_ = n.Close()
			}
		}
		// The node state of an established deployment (what a Client's
		// first rounds on new nodes write), so that the acquire takes its
		// usual path instead of reporting the restart guard.
		for _, n := range nodes {
			if kind == bareMin {
				for _, s := range []*redis.Script{minAcquire, minRelease} {
					if err := s.Load(context.Background(), n).Err(); err != nil {
						closeNodes()
						return nil, nil, err
					}
				}
			}
			if err := n.HSetNX(context.Background(), protocol.StateKey, "g", "0").Err(); err != nil {
				closeNodes()
				return nil, nil, err
			}
		}
		b := &bare{nodes: nodes, workers: quorum.NewWorkers(), kind: kind, proto: protocol.New(redlock.DefaultRestartGuard, false, protocol.Handoff, ""), timeout: timeout}
		return b, func() { b.workers.Close(); closeNodes() }, nil
	}}
}

// bareKind is which scripts a bare implementation sends.
type bareKind int

const (
	bareScripts bareKind = iota // redquorum's
	bareMin                     // the least a guarded lock needs
	bareNoop                    // a script that does nothing
	barePipe                    // SET NX PX GET and HGET in one write, then redquorum's release
)

type bare struct {
	nodes   []redis.UniversalClient
	workers *quorum.Workers
	kind    bareKind
	proto   *protocol.Protocol // the lock scripts, as redlock runs them with its default restart guard
	timeout time.Duration      // of each call
}

var (
	// noop is the script of bare-noop.
	noop = redis.NewScript("return 0")
	// minAcquire and minRelease are bare-min's scripts; KEYS and ARGV as
	// for redquorum's (acquire: the key, then the node's state; the token
	// and the TTL in ms), replies 0 and 1 as theirs when the lock is
	// taken and released.
	minAcquire = redis.NewScript(`if redis.call('HGET', KEYS[2], 'g') ~= '0' then return -2 end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
return 1`)
	minRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)
)

func (b *bare) Lock(ctx context.Context, key string, ttl time.Duration) (loadtest.Unlocker, error) {
	var acquire, release []any // nil: the no-op script
	switch b.kind {
	case bareScripts:
		token := retry.Token()
		acquire = b.proto.AcquireCmd(protocol.Acquire{Keys: []string{key, protocol.StateKey}, Token: token, TTL: ttl})
		release = b.proto.Release(protocol.Release{Keys: []string{key}, Token: token, TTL: ttl, Announce: true})
	case bareMin:
		token := retry.Token()
		acquire = []any{"evalsha", minAcquire.Hash(), 2, key, protocol.StateKey, token, ttl.Milliseconds()}
		release = []any{"evalsha", minRelease.Hash(), 1, key, token}
	case barePipe:
		token := retry.Token()
		acquire = []any{"pipe", key, token, ttl.Milliseconds()}
		release = b.proto.Release(protocol.Release{Keys: []string{key}, Token: token, TTL: ttl, Announce: true})
	}
	r, err := b.round(ctx, acquire, 0, nil)
	if err != nil {
		return nil, err
	}
	return bareUnlock{b, release, r}, nil
}

type bareUnlock struct {
	b       *bare
	args    []any
	acquire *quorum.Round
}

func (u bareUnlock) Unlock(ctx context.Context) error {
	_, err := u.b.round(ctx, u.args, 1, u.acquire)
	return err
}

// round sends args to every node and returns once a majority has answered
// want (a no-op round: anything). As the library's rounds, its calls
// outlive ctx, and, after an earlier round (the acquire of a release),
// each node's call waits for that round's call to that node: otherwise a
// release overtakes its acquire where that one is late, and the acquire
// leaves a key (or, for our release script, a tombstone) behind, which a
// later lock of the same key pays for.
func (b *bare) round(ctx context.Context, args []any, want int64, after *quorum.Round) (*quorum.Round, error) {
	r := b.workers.Start(context.WithoutCancel(ctx), len(b.nodes), b.timeout, func(ctx context.Context, i int) error {
		if after != nil {
			select {
			case <-after.Done(i):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if args == nil {
			return noop.Run(ctx, b.nodes[i], nil).Err() // EVALSHA, EVAL on NOSCRIPT
		}
		// 0 from the acquire (granted), 1 from the release (deleted):
		// anything else means the round did not do a lock's work.
		var v int64
		var err error
		if args[0] == "pipe" { // barePipe's acquire; its release is a script
			// Granted when the SET found the key free (nil) and the node
			// is established.
			p := b.nodes[i].Pipeline()
			set := p.Do(ctx, "set", args[1], args[2], "nx", "px", args[3], "get")
			g := p.Do(ctx, "hget", protocol.StateKey, "g")
			_, _ = p.Exec(ctx)
			if err := set.Err(); err != redis.Nil {
				return fmt.Errorf("bare: node %d: SET NX answered %v, want nil", i, err)
			}
			if s, err := g.Text(); s != "0" {
				return fmt.Errorf("bare: node %d: guard %q (%v), want \"0\"", i, s, err)
			}
			return nil
		}
		if b.kind == bareMin {
			v, err = b.nodes[i].Do(ctx, args...).Int64() // loaded by bareImpl
		} else {
			v, err = b.proto.RunInt(ctx, b.nodes[i], args)
		}
		if err == nil && v != want {
			err = fmt.Errorf("bare: node %d answered %d, want %d", i, v, want)
		}
		return err
	})
	_, err := r.Await(ctx, len(b.nodes)/2+1)
	return r, err // the other calls finish in the background; workers.Close waits for them
}
