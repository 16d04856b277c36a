package redlock

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/node"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/queue"
	"github.com/redquorum/redquorum/internal/waiting"
	"github.com/redquorum/redquorum/internal/wake"
)

// Names and outcomes the tests look for, from the packages that own them.
const (
	reservedKey     = protocol.StateKey
	releasedChannel = protocol.ReleasedChannel
	maxHandovers    = queue.MaxHandovers
)

var errNotSent = node.ErrNotSent

// testScript is a node script as a go-redis Script: the one of a Client
// with the default options, for tests that run it with arguments of their
// own. Is recognises the commands of every Client's variant of it (each
// waiting strategy, fenced or not).
type testScript struct {
	*redis.Script
	variants map[any]bool // SHA, and source for a call by EVAL
}

// Is reports whether sha, the second argument of EVALSHA or EVAL, is the
// SHA or the source of a variant of s.
func (s testScript) Is(sha any) bool { return s.variants[sha] }

// testScripts are the node scripts (see testScript).
type testScripts struct{ Acquire, Release, Extend, Fence, Check testScript }

// checkSource is the connection check's Lua source as sent.
var _, _, _, _, checkSource = protocol.New(0, false, protocol.Kernel, "").Sources()

var scripts = func() testScripts {
	var all [5]testScript
	for _, fenced := range []bool{true, false} {
		for s := protocol.Kernel; s <= protocol.Handoff; s++ {
			a, r, e, f, c := protocol.New(0, fenced, s, "").Sources()
			for i, src := range []string{a, r, e, f, c} {
				sc := redis.NewScript(src)
				if all[i].variants == nil {
					all[i].variants = map[any]bool{}
				}
				if s == protocol.Handoff && !fenced {
					all[i].Script = sc
				}
				all[i].variants[sc.Hash()] = true
				all[i].variants[src] = true
			}
		}
	}
	return testScripts{all[0], all[1], all[2], all[3], all[4]}
}()

// kernelAcquire is the acquire script without a waiting strategy, fenced
// or not: ARGV token, ttl, guard, shortcut, over.
func kernelAcquire(fenced bool) *redis.Script {
	a, _, _, _, _ := protocol.New(0, fenced, protocol.Kernel, "").Sources()
	return redis.NewScript(a)
}

// runScript sends args, a script command, to node by SHA, loading the
// script if the node lacks it.
func runScript(ctx context.Context, node protocol.Processor, args []any) (any, error) {
	return protocol.New(0, false, protocol.Handoff, "").Run(ctx, node, args)
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

// openTuned is Open with the tunables that tune sets.
func openTuned(addrs []string, opts *Options, tune func(*tunables)) (*Client, error) {
	cfg, err := opts.config(len(addrs))
	if err != nil {
		return nil, err
	}
	tune(&cfg.tunables)
	return openConfig(addrs, cfg)
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

// handChannel returns the hand channel on which the nodes tell c of
// handoffs to its waiters, "" when its strategy is not the handoff.
func (c *Client) handChannel() string {
	if h, ok := c.wait.(waiting.Handoffs); ok {
		return h.Channel()
	}
	return ""
}

// handoffs returns what c's handoff strategy tells of its handoffs (see
// waiting.Handoffs); c's strategy must be the handoff.
func (c *Client) handoffs() waiting.Handoffs { return c.wait.(waiting.Handoffs) }

// ticketStep is the resolution of the waiters' tickets, in ms.
const ticketStep = waiting.TicketStep

// ledger returns what c's nodes told it of handoffs, nil when its strategy
// is not the handoff.
func (c *Client) ledger() *wake.Ledger {
	if h, ok := c.wait.(waiting.Handoffs); ok {
		return h.Ledger()
	}
	return nil
}
