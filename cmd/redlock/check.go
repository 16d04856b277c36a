package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/protocol"
)

// nodeCheck is what guard learns about one node before it changes
// anything.
type nodeCheck struct {
	state   nodeState
	cluster bool          // a Redis Cluster node: its state is one per hash slot
	live    string        // a live lock key, "" when none was found
	liveTTL time.Duration // its remaining TTL
	err     error         // the node could not be read
}

// stateText is the node's state as guard shows it.
func (c nodeCheck) stateText() string {
	switch {
	case c.err != nil:
		return "error: " + oneLine(c.err.Error())
	case c.cluster:
		return "Redis Cluster node (one state per hash slot)"
	}
	return c.state.String()
}

// problem returns, in a few words, why this node says guard end must not
// touch the nodes. It returns "" when the node tells nothing against it.
func (c nodeCheck) problem() string {
	switch {
	case c.err != nil:
		return "is unreachable: " + oneLine(c.err.Error())
	case c.cluster:
		return "is a Redis Cluster node, whose restart guard is one state per hash slot and cannot be ended from here"
	case c.live != "":
		return fmt.Sprintf("holds the live lock key %q (ttl %s)", c.live, seconds(c.liveTTL))
	}
	return ""
}

// checkNodes checks whether each node is a Cluster node, and reads its
// state. When scan is set, it also looks for a live lock key under prefix.
func checkNodes(ctx context.Context, nodes []redis.UniversalClient, prefix string, scan bool) []nodeCheck {
	checks := make([]nodeCheck, len(nodes))
	eachNode(len(nodes), func(i int) {
		n, c := nodes[i], &checks[i]
		if c.cluster, c.err = isCluster(ctx, n); c.err != nil || c.cluster {
			return
		}
		if c.state, c.err = readState(ctx, n, prefix+protocol.StateKey); c.err != nil || !scan {
			return
		}
		c.live, c.liveTTL, c.err = liveKey(ctx, n, prefix)
	})
	return checks
}

// eachNode runs f(i) for every node i of n at once, and returns when all
// have. Each node's reads have their own timeout, so n unreachable nodes
// cost one timeout, not n. f records its node's result and error itself,
// so that one node's failure stops none of the others.
func eachNode(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { f(i) })
	}
	wg.Wait()
}

// isCluster reports whether n is a Redis Cluster node, or a network error.
// A server that answers INFO cluster with an error reply, such as miniredis
// or a proxy, is taken for a plain master.
func isCluster(ctx context.Context, n redis.UniversalClient) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	info, err := n.Info(ctx, "cluster").Result()
	var reply redis.Error
	switch {
	case errors.As(err, &reply):
		return false, nil
	case err != nil:
		return false, err
	}
	return strings.Contains(info, "cluster_enabled:1"), nil
}

// liveKey returns a live lock key of n under prefix, with its remaining
// TTL. Such a key has a TTL and is neither a node state nor a tombstone, so
// a lock may be held. It returns "" when there is none.
func liveKey(ctx context.Context, n redis.UniversalClient, prefix string) (string, time.Duration, error) {
	match := globEscape(prefix) + "*"
	var cursor uint64
	for {
		sctx, cancel := context.WithTimeout(ctx, opTimeout)
		keys, next, err := n.Scan(sctx, cursor, match, 1000).Result()
		var key string
		var ttl time.Duration
		if err == nil {
			key, ttl, err = firstLive(sctx, n, prefix, keys)
		}
		cancel()
		if err != nil || key != "" || next == 0 {
			return key, ttl, err
		}
		cursor = next
	}
}

// firstLive returns the first of keys that is a live lock key (see
// liveKey), with its remaining TTL.
func firstLive(ctx context.Context, n redis.UniversalClient, prefix string, keys []string) (string, time.Duration, error) {
	var cand []string
	for _, k := range keys {
		if !reserved(prefix, k) {
			cand = append(cand, k)
		}
	}
	if len(cand) == 0 {
		return "", 0, nil
	}
	ttls := make([]*redis.DurationCmd, len(cand))
	vals := make([]*redis.StringCmd, len(cand))
	_, err := n.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range cand {
			ttls[i], vals[i] = p.PTTL(ctx, k), p.Get(ctx, k)
		}
		return nil
	})
	var reply redis.Error
	if err != nil && !errors.As(err, &reply) {
		return "", 0, err // an error reply (a key gone meanwhile, not a string) is per key
	}
	for i, k := range cand {
		ttl, terr := ttls[i].Result()
		if terr != nil || ttl <= 0 { // -1: no TTL, -2: gone
			continue
		}
		v, err := vals[i].Result()
		if errors.Is(err, redis.Nil) || (err == nil && strings.HasPrefix(v, protocol.TombstonePrefix)) {
			continue // gone meanwhile, or a tombstone: free for every other token
		}
		return k, ttl, nil
	}
	return "", 0, nil
}

// globEscape escapes the characters that have a meaning in SCAN's MATCH
// pattern. The pattern then matches prefix as it is.
func globEscape(prefix string) string {
	var b strings.Builder
	for _, r := range prefix {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// reserved reports whether k, a key found on a node, is one of the
// library's own and not a lock key. Such a key is a node state or a line
// of waiters. Lock keys must not start with either.
func reserved(prefix, k string) bool {
	rest, ok := strings.CutPrefix(k, prefix)
	return ok && protocol.Reserved(rest)
}
