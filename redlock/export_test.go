package redlock

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/node"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/queue"
)

// Names and outcomes the tests look for, from the packages that own them.
const (
	reservedKey     = protocol.StateKey
	releasedChannel = protocol.ReleasedChannel
	maxHandoffs     = queue.MaxHandoffs
)

var errNotSent = node.ErrNotSent

// testScripts are the node scripts as go-redis Scripts, for tests that run
// one with arguments of their own or recognise its commands by SHA.
type testScripts struct{ Acquire, Release, Extend, Fence, Check *redis.Script }

// checkSource is the connection check's Lua source as sent.
var _, _, _, _, checkSource = protocol.New(0, false).Sources()

var scripts = func() testScripts {
	a, r, e, f, c := protocol.New(0, false).Sources()
	return testScripts{redis.NewScript(a), redis.NewScript(r), redis.NewScript(e), redis.NewScript(f), redis.NewScript(c)}
}()

// runScript sends args, a script command, to node by SHA, loading the
// script if the node lacks it.
func runScript(ctx context.Context, node protocol.Processor, args []any) (any, error) {
	return protocol.New(0, false).Run(ctx, node, args)
}

// newTuned is New with tune applied to the Client's tunables.
func newTuned(nodes []redis.UniversalClient, opts *Options, tune func(*tunables)) (*Client, error) {
	cfg, err := opts.config(len(nodes))
	if err != nil {
		return nil, err
	}
	if tune != nil {
		tune(&cfg.tunables)
	}
	return newClient(nodes, cfg)
}

// settle waits until cl's requests still in flight (answers that came after
// a round's decision, releases of failed rounds and of unlocks, and the
// redelivery of releases in doubt) have landed, so that a test's next step
// (a restart, a clock move, a fresh node state) cannot race with them.
func settle(cl *Client) {
	cl.life.workers.Wait()
	for _, n := range cl.nodes {
		n.Wait()
	}
}
