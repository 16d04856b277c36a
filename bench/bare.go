package main

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/loadtest"
	"github.com/redquorum/redquorum/internal/retry"
	"github.com/redquorum/redquorum/internal/scripts"
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
		b := &bare{nodes: nodes, workers: quorum.NewWorkers(), real: real}
		return b, func() {
			b.workers.Close()
			for _, n := range nodes {
				_ = n.Close()
			}
		}, nil
	}}
}

type bare struct {
	nodes   []redis.UniversalClient
	workers *quorum.Workers
	real    bool
}

// noop is the script of bare-noop.
var noop = redis.NewScript("return 0")

func (b *bare) Lock(ctx context.Context, key string, ttl time.Duration) (loadtest.Unlocker, error) {
	var acquire, release []any // nil: the no-op script
	if b.real {
		token, ms := retry.Token(), ttl.Milliseconds()
		guard := redlock.DefaultRestartGuard.Milliseconds()
		acquire = scripts.Args(scripts.Acquire, []string{key, "redquorum:state"}, token, ms, guard, "", "0", "")
		release = scripts.Args(scripts.Release, []string{key}, token, "1", ms)
	}
	if err := b.round(ctx, acquire); err != nil {
		return nil, err
	}
	return bareUnlock{b, release}, nil
}

type bareUnlock struct {
	b    *bare
	args []any
}

func (u bareUnlock) Unlock(ctx context.Context) error { return u.b.round(ctx, u.args) }

// round sends args to every node and returns once a majority has answered.
func (b *bare) round(ctx context.Context, args []any) error {
	r := b.workers.Start(ctx, len(b.nodes), redlock.DefaultNodeTimeout, func(ctx context.Context, i int) error {
		if args == nil {
			return noop.Run(ctx, b.nodes[i], nil).Err() // EVALSHA, EVAL on NOSCRIPT
		}
		_, err := scripts.Run(ctx, b.nodes[i], args)
		return err
	})
	_, err := r.Await(ctx, len(b.nodes)/2+1)
	return err // the other calls finish in the background; workers.Close waits for them
}
