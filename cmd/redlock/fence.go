package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/redlock"
)

const guardFenceAbout = `Repairs the fence counters of a deployment whose nodes lost their data.
A node that lost its data has an unknown fence counter ("fence unknown");
when so many have one that the others are fewer than a quorum, every fenced
lock (Options.Fencing) fails at once with ErrFenceUnknown, and no fenced
lock can repair them.

It sets the field f of the state key (prefix + "` + protocol.StateKey + `") on every
node to T = 1 + the largest of: every node's known counter, --at-least, and
the current Unix time in microseconds (the latest of this machine's clock
and the nodes' clocks). Each node raises its counter to T in one script and
never lowers it. T is above every fence issued before: fences start at 0
(or at an earlier repair's T) and grow by at most one per fenced lock, and
no deployment obtains a fenced lock per microsecond. Give --at-least the
highest fence any protected resource has accepted when you know it, or when
this machine's clock may be behind the clock of an earlier repair.

It first reads every node and refuses, changing nothing on any node, when a
node cannot be reached. It leaves a Redis Cluster node alone: its counters
are one per hash slot, and the next fenced locks set them once the plain
masters have theirs. Give every node of the deployment in --nodes. It
leaves the restart guard alone. Without --yes it only shows what it would do, and
exits with status 1.

`

// maxFence is the largest fence the nodes count exactly. They count in Lua
// numbers, which are exact up to 2^53.
const maxFence = 1 << 53

// raiseFence raises the fence counter f of the state key KEYS[1] to
// ARGV[1], unless it is higher. It returns the counter it then has.
var raiseFence = redis.NewScript(`
local f = redis.call('HGET', KEYS[1], 'f')
if f and tonumber(f) >= tonumber(ARGV[1]) then return f end
redis.call('HSET', KEYS[1], 'f', ARGV[1])
return ARGV[1]
`)

// guardFence reads every node's fence counter. With --yes it then raises
// the counter on each node to one above every fence issued before.
func guardFence(ctx context.Context, args []string, out io.Writer) error {
	a, err := parseGuard("fence", guardFenceAbout, args, out)
	if err != nil {
		return err
	}
	if a.atLeast >= maxFence {
		return usagef("--at-least %d is not below 2^53, the largest fence the nodes count exactly", a.atLeast)
	}
	nodes := redlock.NewNodes(a.addrs...)
	defer closeNodes(nodes)
	checks := checkNodes(ctx, nodes, a.prefix, false)
	key := a.prefix + protocol.StateKey
	target, problems := fenceTarget(ctx, a, nodes, checks)
	states, actions := make([]string, len(nodes)), make([]string, len(nodes))
	for i, c := range checks {
		states[i], actions[i] = fenceText(c), "would raise to "+strconv.FormatUint(target, 10)
		if c.cluster {
			actions[i] = "would leave it alone (one counter per hash slot)"
		}
	}
	switch {
	case problems != nil:
		for i := range actions {
			actions[i] = "unchanged"
		}
		if err := printFenceRows(out, a.names, states, actions); err != nil {
			return err
		}
		return fmt.Errorf("refused, nothing changed on any node: %s", strings.Join(problems, "; "))
	case target >= maxFence:
		return fmt.Errorf("refused, nothing changed on any node: the fence %d is not below 2^53, the largest the nodes count exactly", target)
	case !a.yes:
		if err := printFenceRows(out, a.names, states, actions); err != nil {
			return err
		}
		return fmt.Errorf("nothing changed: add --yes to raise the fence counter on these %d nodes to %d", len(nodes), target)
	}
	failed := raiseAll(ctx, a.names, nodes, checks, key, target, actions)
	if err := printFenceRows(out, a.names, states, actions); err != nil {
		return err
	}
	if failed != nil {
		return fmt.Errorf("could not raise every node's fence counter: %v", failed)
	}
	return nil
}

// raiseAll raises the fence counter of every plain master to target. It
// writes what it did on each node in actions. It leaves a Redis Cluster
// node alone, whose counters are one per hash slot. Options.Fencing needs a
// quorum of plain masters. Once these have their counters, the next fenced
// lock on a slot sets that slot's counter.
func raiseAll(ctx context.Context, names []string, nodes []redis.UniversalClient, checks []nodeCheck, key string, target uint64, actions []string) error {
	errs := make([]error, len(nodes))
	eachNode(len(nodes), func(i int) {
		if checks[i].cluster {
			actions[i] = "left alone: the next fenced locks set its counters, one per hash slot"
			return
		}
		var err error
		if actions[i], err = raiseOn(ctx, nodes[i], key, target); err != nil {
			errs[i] = fmt.Errorf("node %s: %w", names[i], err)
		}
	})
	return errors.Join(errs...)
}

// fenceTarget returns the fence to set. It is one above every node's known
// counter, above --at-least, and above the time in microseconds. That time
// is read on this machine's clock and on the nodes'. It also returns why
// each node that stands against the repair does.
func fenceTarget(ctx context.Context, a guardArgs, nodes []redis.UniversalClient, checks []nodeCheck) (uint64, []string) {
	hi := max(a.atLeast, uint64(time.Now().UnixMicro()))
	var problems []string
	for i, c := range checks {
		switch {
		case c.err != nil:
			problems = append(problems, "node "+a.names[i]+" "+c.problem())
			continue
		case c.cluster:
			continue // its counters are per hash slot (see raiseAll)
		}
		now, err := nodeTime(ctx, nodes[i])
		if err != nil {
			problems = append(problems, "node "+a.names[i]+" is unreachable: "+oneLine(err.Error()))
			continue
		}
		hi = max(hi, uint64(now.UnixMicro()))
		if f, err := strconv.ParseUint(c.state.fence, 10, 64); err == nil {
			hi = max(hi, f)
		}
	}
	return hi + 1, problems
}

// raiseOn raises node n's fence counter to target and says what it did.
func raiseOn(ctx context.Context, n redis.UniversalClient, key string, target uint64) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	want := strconv.FormatUint(target, 10)
	got, err := raiseFence.Run(ctx, n, []string{key}, want).Text()
	switch {
	case err != nil:
		return "failed: " + oneLine(err.Error()), err
	case got != want:
		return "kept " + got + " (higher)", nil
	}
	return "raised to " + got, nil
}

// fenceText returns a node's fence counter as guard fence shows it.
func fenceText(c nodeCheck) string {
	switch {
	case c.err != nil || c.cluster:
		return c.stateText()
	case c.state.fence == "":
		return "unknown"
	}
	return c.state.fence
}

// printFenceRows prints one line per node. It shows the node's fence
// counter, and what guard fence did or would do there.
func printFenceRows(out io.Writer, names, fences, actions []string) error {
	return printRows(out, "fence", names, fences, actions)
}

// nodeTime reads node n's clock.
func nodeTime(ctx context.Context, n redis.UniversalClient) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	return n.Time(ctx).Result()
}
