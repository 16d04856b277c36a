package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/retry"
	"github.com/redquorum/redquorum/internal/testkit/loadtest"
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
//   - bare-noop sends a script that only returns 0: the gap between it and
//     bare-scripts is what the scripts cost the nodes.
//
// They never wait for a key: use them only in the 1-caller scenario
// (--only distinct-1), where no two rounds share a key.
func bareImpl(name string, real bool) loadtest.Impl {
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
			if err := n.HSetNX(context.Background(), protocol.StateKey, "g", "0").Err(); err != nil {
				closeNodes()
				return nil, nil, err
			}
		}
		b := &bare{nodes: nodes, workers: quorum.NewWorkers(), real: real, proto: protocol.New(redlock.DefaultRestartGuard, false)}
		return b, func() { b.workers.Close(); closeNodes() }, nil
	}}
}

type bare struct {
	nodes   []redis.UniversalClient
	workers *quorum.Workers
	real    bool
	proto   *protocol.Protocol // the lock scripts, as redlock runs them with its default restart guard
}

// noop is the script of bare-noop.
var noop = redis.NewScript("return 0")

func (b *bare) Lock(ctx context.Context, key string, ttl time.Duration) (loadtest.Unlocker, error) {
	var acquire, release []any // nil: the no-op script
	if b.real {
		token := retry.Token()
		acquire = b.proto.AcquireCmd(protocol.Acquire{Keys: []string{key, protocol.StateKey}, Token: token, TTL: ttl})
		release = b.proto.Release([]string{key}, token, ttl, true)
	}
	if err := b.round(ctx, acquire, 0); err != nil {
		return nil, err
	}
	return bareUnlock{b, release}, nil
}

type bareUnlock struct {
	b    *bare
	args []any
}

func (u bareUnlock) Unlock(ctx context.Context) error { return u.b.round(ctx, u.args, 1) }

// round sends args to every node and returns once a majority has answered
// want (a no-op round: anything).
func (b *bare) round(ctx context.Context, args []any, want int64) error {
	r := b.workers.Start(ctx, len(b.nodes), redlock.DefaultNodeTimeout, func(ctx context.Context, i int) error {
		if args == nil {
			return noop.Run(ctx, b.nodes[i], nil).Err() // EVALSHA, EVAL on NOSCRIPT
		}
		// 0 from the acquire (granted), 1 from the release (deleted):
		// anything else means the round did not do a lock's work.
		v, err := b.proto.RunInt(ctx, b.nodes[i], args)
		if err == nil && v != want {
			err = fmt.Errorf("bare-scripts: node %d answered %d, want %d", i, v, want)
		}
		return err
	})
	_, err := r.Await(ctx, len(b.nodes)/2+1)
	return err // the other calls finish in the background; workers.Close waits for them
}
