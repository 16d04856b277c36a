package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/protocol"
)

// inspect shows who holds KEY on each node and whether a quorum agrees.
func inspect(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlags("inspect", "KEY --nodes host:port,... [--prefix P]", out)
	nodesFlag := fs.String("nodes", "", "comma-separated Redis masters (required)")
	prefix := fs.String("prefix", "", "the Options.KeyPrefix of the locking clients")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 1:
		return usagef("want exactly one KEY, got %d arguments", len(pos))
	case pos[0] == "":
		return usagef("empty KEY")
	case *nodesFlag == "":
		return usagef("--nodes is required")
	}
	addrs, err := parseNodes(*nodesFlag)
	if err != nil {
		return err
	}
	nodes, err := dialNodes(ctx, addrs)
	if err != nil {
		return err
	}
	defer closeNodes(nodes)
	key := *prefix + pos[0]
	quorum := len(nodes)/2 + 1

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "node\tholder\tttl\tfence\n")
	votes := map[string]int{}
	var failed error
	for i, n := range nodes {
		holder, ttl, fence, err := read(ctx, n, key, *prefix+protocol.StateKey)
		switch {
		case err != nil:
			fmt.Fprintf(tw, "%s\terror: %s\t-\t-\n", addrs[i], oneLine(err.Error()))
			failed = errors.Join(failed, fmt.Errorf("%s: %w", addrs[i], err))
		case holder == "":
			fmt.Fprintf(tw, "%s\t(free)\t-\t%s\n", addrs[i], fence)
		default:
			votes[holder]++
			shown := ttl.String()
			if ttl < 0 {
				shown = "none (not a lock)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", addrs[i], short(holder), shown, fence)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	best, bestN := "", 0
	for h, n := range votes {
		if n > bestN {
			best, bestN = h, n
		}
	}
	switch {
	case bestN >= quorum:
		fmt.Fprintf(out, "held: %d of %d nodes agree on holder %s (quorum %d)\n", bestN, len(nodes), short(best), quorum)
	case bestN == 0 && failed == nil:
		fmt.Fprintf(out, "free: no node holds %q\n", key)
	default:
		fmt.Fprintf(out, "no quorum: at most %d of %d nodes agree on one holder, %d needed (a lock round in progress, or leftovers that expire with their TTL)\n", bestN, len(nodes), quorum)
	}
	if failed != nil {
		return fmt.Errorf("could not read every node: %v", failed)
	}
	return nil
}

// read returns the value of key on one node, its remaining TTL and the node's
// fence counter ("-" when the node has no counter yet or lost it); holder is
// "" when the key does not exist.
func read(ctx context.Context, n redis.UniversalClient, key, state string) (holder string, ttl time.Duration, fence string, err error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var get *redis.StringCmd
	var pttl *redis.DurationCmd
	var f *redis.StringCmd
	_, err = n.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, key)
		pttl = p.PTTL(ctx, key)
		f = p.HGet(ctx, state, "f")
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", 0, "", err
	}
	fence = f.Val()
	if fence == "" {
		fence = "-"
	}
	if errors.Is(get.Err(), redis.Nil) || strings.HasPrefix(get.Val(), protocol.TombstonePrefix) {
		return "", 0, fence, nil // free (a tombstone is free for every other token)
	}
	ttl = pttl.Val()
	if ttl < 0 {
		return get.Val(), -1, fence, nil // no expiry
	}
	return get.Val(), ttl.Truncate(time.Millisecond), fence, nil
}

// short shortens a token for display.
func short(tok string) string {
	if len(tok) <= 10 {
		return tok
	}
	return tok[:8] + "…"
}
