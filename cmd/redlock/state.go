package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/protocol"
)

// opTimeout bounds each request the command sends to a node.
const opTimeout = 2 * time.Second

// nodeState is what a node's state key says about its restart guard and
// its fence counter (see acquire.lua).
type nodeState struct {
	known     bool          // the state key has a guard field g
	guardLeft time.Duration // while guarded, the time left on the node's clock
	fence     string        // the field f; "" when the counter is unknown
	bad       string        // a g that is not a time in ms, shown as it is
	// changed is set when the connection check (check.lua) started the
	// guard. Its mark is "x", which no round sets.
	changed bool
}

// String returns the state as inspect and guard show it.
func (s nodeState) String() string {
	switch {
	case s.bad != "":
		return fmt.Sprintf("unreadable state (g=%q)", s.bad)
	case !s.known:
		return "no state (new or lost its data)"
	case s.guardLeft > 0 && s.changed:
		return "guarded for " + seconds(s.guardLeft) + " (server changed: failover or restart)"
	case s.guardLeft > 0:
		return "guarded for " + seconds(s.guardLeft)
	case s.fence == "":
		return "serving, fence unknown"
	default:
		return "serving"
	}
}

// seconds shows d, a time left, in whole seconds rounded up.
func seconds(d time.Duration) string {
	return fmt.Sprintf("%ds", int64((d+time.Second-1)/time.Second))
}

// fenceColumn returns the fence counter as the fence column shows it.
func (s nodeState) fenceColumn() string {
	if s.fence == "" {
		return "-"
	}
	return s.fence
}

// stateCmds reads a node's state key and the node's clock. They are queued
// on a pipeline with other reads.
type stateCmds struct {
	hash *redis.MapStringStringCmd
	now  *redis.TimeCmd
}

// queueState queues the reads of the state key key on p.
func queueState(ctx context.Context, p redis.Pipeliner, key string) stateCmds {
	return stateCmds{hash: p.HGetAll(ctx, key), now: p.Time(ctx)}
}

// state decodes the replies of c once its pipeline has run. The guard field
// holds a time on the node's clock, so the time left is taken from the
// node's TIME, not from this machine's clock.
func (c stateCmds) state() (nodeState, error) {
	h, err := c.hash.Result()
	if err != nil {
		return nodeState{}, err
	}
	now, err := c.now.Result()
	if err != nil {
		return nodeState{}, err
	}
	g, ok := h["g"]
	if !ok {
		return nodeState{fence: h["f"]}, nil // acquire.lua treats a state without g as none
	}
	s := nodeState{known: true, fence: h["f"], changed: h["v"] == protocol.CheckMark}
	until, err := strconv.ParseInt(g, 10, 64)
	if err != nil {
		s.bad = g
		return s, nil
	}
	if left := until - now.UnixMilli(); until != 0 && left > 0 {
		s.guardLeft = time.Duration(left) * time.Millisecond
	}
	return s, nil
}

// readState reads the state key key of node n.
func readState(ctx context.Context, n redis.UniversalClient, key string) (nodeState, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	var c stateCmds
	if _, err := n.Pipelined(ctx, func(p redis.Pipeliner) error {
		c = queueState(ctx, p, key)
		return nil
	}); err != nil {
		return nodeState{}, err
	}
	return c.state()
}
