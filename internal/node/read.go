package node

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Value is what a node holds at one key.
type Value struct {
	Data string        // the value as stored ("" when the key is missing); protocol.Holding reads a lock key's
	TTL  time.Duration // the key's remaining TTL; not positive when it has none or is missing
}

// Read returns what the node holds at keys (as stored) and their TTLs, in
// one pipeline. It changes nothing on the node.
func (n *Node) Read(ctx context.Context, keys []string) ([]Value, error) {
	if err := n.enter(ctx, nil); err != nil {
		return nil, err
	}
	defer n.exit()
	pipe := n.client.Pipeline()
	gets := make([]*redis.StringCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	for i, k := range keys {
		gets[i] = pipe.Get(ctx, k)
		ttls[i] = pipe.PTTL(ctx, k)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	vals := make([]Value, len(keys))
	for i := range keys {
		if err := gets[i].Err(); err != nil && !errors.Is(err, redis.Nil) {
			return nil, err
		}
		if err := ttls[i].Err(); err != nil {
			return nil, err
		}
		vals[i] = Value{Data: gets[i].Val(), TTL: ttls[i].Val()}
	}
	return vals, nil
}
