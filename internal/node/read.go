package node

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/protocol"
)

// Value is what a node holds at one key.
type Value struct {
	Data string        // the value as stored ("" when the key is missing); protocol.Holding reads a lock key's
	TTL  time.Duration // the key's remaining TTL; not positive when it has none or is missing
}

// Guard is a node's restart guard as a read found it.
type Guard struct {
	// On is set when the node is in its guard or has no state: what it
	// holds is not to be trusted. It may lack keys that it granted, or
	// hold the keys of holders that have left since (a restart from an
	// older file, a promoted replica that lagged).
	On bool
	// NoState is set when the node has no state: it is new, or lost its
	// data, and its next acquire starts a whole guard.
	NoState bool
	// Left is the time left in a guard that runs.
	Left time.Duration
}

// Read returns what the node holds at keys (as stored) and their TTLs, in
// one pipeline. It changes nothing on the node.
//
// When state is not "", it is the plain state key as stored. Read then also
// reads the node's restart guard: on a Cluster node, the one of the first
// key's hash slot. A Ring's guard is not read. Its state key lives on the
// shard of the lock's first key, which only a script reaches.
func (n *Node) Read(ctx context.Context, keys []string, state string) ([]Value, Guard, error) {
	if err := n.enter(ctx, nil); err != nil {
		return nil, Guard{}, err
	}
	defer n.exit()
	pipe := n.client.Pipeline()
	var guard *redis.StringCmd
	var now *redis.TimeCmd
	if state != "" && n.kind != Ring {
		if n.kind == Cluster {
			state = protocol.SlotStateKey(n.cfg.Prefix, keys[0], n.cfg.Tags)
		}
		guard, now = pipe.HGet(ctx, state, "g"), pipe.Time(ctx)
	}
	gets := make([]*redis.StringCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	for i, k := range keys {
		gets[i] = pipe.Get(ctx, k)
		ttls[i] = pipe.PTTL(ctx, k)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	var g Guard
	if guard != nil {
		var err error
		if g, err = guardOf(guard, now); err != nil {
			return nil, Guard{}, err
		}
	}
	vals := make([]Value, len(keys))
	for i := range keys {
		if err := gets[i].Err(); err != nil && !errors.Is(err, redis.Nil) {
			return nil, Guard{}, err
		}
		if err := ttls[i].Err(); err != nil {
			return nil, Guard{}, err
		}
		vals[i] = Value{Data: gets[i].Val(), TTL: ttls[i].Val()}
	}
	return vals, g, nil
}

// guardOf returns the guard of a node from two replies. guard is its state's
// guard field: "0" out of the guard, else its end in the node's milliseconds.
// now is the node's time.
func guardOf(guard *redis.StringCmd, now *redis.TimeCmd) (Guard, error) {
	g, err := guard.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return Guard{On: true, NoState: true}, nil
	case err != nil:
		return Guard{}, err
	case g == "0":
		return Guard{}, nil
	}
	end, err := strconv.ParseInt(g, 10, 64)
	if err != nil {
		return Guard{On: true}, nil // not a time: not known to be out of the guard
	}
	t, err := now.Result()
	if err != nil {
		return Guard{}, err
	}
	if left := end - t.UnixMilli(); left > 0 {
		return Guard{On: true, Left: time.Duration(left) * time.Millisecond}, nil
	}
	return Guard{}, nil
}

// InLine reads, in one pipeline, what the node holds at key (as stored,
// with its mark and tombstones; "" when it is missing) and whether member
// is in line, the sorted set of the key's waiters (see
// protocol.LinePrefix). It changes nothing on the node: a waiter reads it
// to learn whether a round would change anything there.
func (n *Node) InLine(ctx context.Context, key, line, member string) (value string, queued bool, err error) {
	if err := n.enter(ctx, nil); err != nil {
		return "", false, err
	}
	defer n.exit()
	pipe := n.client.Pipeline()
	get := pipe.Get(ctx, key)
	score := pipe.ZScore(ctx, line, member)
	_, _ = pipe.Exec(ctx) // each command carries its own error
	if err := get.Err(); err != nil && !errors.Is(err, redis.Nil) {
		return "", false, err
	}
	switch err := score.Err(); {
	case errors.Is(err, redis.Nil):
		return get.Val(), false, nil
	case err != nil:
		return "", false, err
	}
	return get.Val(), true, nil
}
