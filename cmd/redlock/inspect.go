package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/redlock"
)

// inspect shows who holds KEY on each node, each node's restart guard, and
// whether a quorum agrees on one holder. A node it cannot read gets an error
// row, and the verdict says what the nodes it reached allow. inspect then
// returns an error naming the nodes it could not read. With --semaphore or
// --rw, KEY names a semaphore or a read-write lock. inspect then shows each
// held key of it: the writer key, and each slot, a reader's or a
// semaphore's holder.
func inspect(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlags("inspect", "KEY --nodes NODE,... [--prefix P] [--semaphore LIMIT | --rw]", out)
	nodesFlag := fs.String("nodes", "", nodesUsage+" (required)")
	prefix := fs.String("prefix", "", "the Options.KeyPrefix of the locking clients")
	limit := fs.Int("semaphore", 0, "KEY is a semaphore with this limit: show its slots")
	rw := fs.Bool("rw", false, "KEY is a read-write lock: show its writer and readers")
	pos, err := parseOne(fs, args, "KEY", nodesFlag)
	if err != nil {
		return err
	}
	keys, labels, err := inspectKeys(*prefix, pos[0], *limit, *rw)
	if err != nil {
		return err
	}
	addrs, names, err := parseNodes(*nodesFlag)
	if err != nil {
		return err
	}
	nodes := redlock.NewNodes(addrs...)
	defer closeNodes(nodes)
	rows := make([]keyRow, len(nodes))
	var free []string
	for k, key := range keys {
		eachNode(len(nodes), func(i int) { rows[i] = readKey(ctx, nodes[i], key, *prefix+protocol.StateKey) })
		if len(keys) > 1 && !slices.ContainsFunc(rows, func(r keyRow) bool { return r.holder != "" || r.err != nil }) {
			free = append(free, labels[k])
			continue
		}
		if len(keys) > 1 {
			fmt.Fprintf(out, "%s (%s):\n", labels[k], key)
		}
		if err := printKeyRows(out, names, rows); err != nil {
			return err
		}
		fmt.Fprintln(out, verdict(key, rows))
	}
	if len(free) > 0 {
		fmt.Fprintf(out, "free on every node: %s\n", strings.Join(free, ", "))
	}
	var failed error
	for i, r := range rows {
		if r.err != nil {
			failed = errors.Join(failed, fmt.Errorf("node %s: %w", names[i], r.err))
		}
	}
	if failed != nil {
		return fmt.Errorf("could not read every node: %v", failed)
	}
	return nil
}

// inspectKeys returns the keys, as stored, that inspect reads for name, and
// a label for each. By default that is name itself. With limit > 0 it is a
// semaphore's slots. With rw it is a read-write lock's writer key and reader
// slots. Bad flags give a usage error.
func inspectKeys(prefix, name string, limit int, rw bool) (keys, labels []string, err error) {
	switch {
	case limit != 0 && rw:
		return nil, nil, usagef("--semaphore and --rw together")
	case limit < 0 || limit > redlock.MaxSemaphoreLimit:
		return nil, nil, usagef("--semaphore %d is not between 1 and %d", limit, redlock.MaxSemaphoreLimit)
	case rw:
		keys, labels = []string{prefix + protocol.RWMutexPrefix + name + ":writer"}, []string{"writer"}
		limit = redlock.RWMutexReaders
	case limit == 0:
		return []string{prefix + name}, []string{name}, nil
	}
	base := prefix + protocol.SemaphorePrefix + name + ":"
	if rw {
		base = prefix + protocol.RWMutexPrefix + name + ":"
	}
	for i := range limit {
		keys, labels = append(keys, base+strconv.Itoa(i)), append(labels, "slot "+strconv.Itoa(i))
	}
	return keys, labels, nil
}

// keyRow is what one node says about a key.
type keyRow struct {
	holder string        // the token that holds the key; "" when free
	ttl    time.Duration // the holder's remaining TTL; negative: none
	state  nodeState
	err    error // the node could not be read
}

// readKey reads key and the node's state from node n in one round trip.
// The state is the state key stateKey and the node's clock.
func readKey(ctx context.Context, n redis.UniversalClient, key, stateKey string) keyRow {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	var get *redis.StringCmd
	var pttl *redis.DurationCmd
	var sc stateCmds
	_, err := n.Pipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, key)
		pttl = p.PTTL(ctx, key)
		sc = queueState(ctx, p, stateKey)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return keyRow{err: err}
	}
	var r keyRow
	if r.state, r.err = sc.state(); r.err != nil {
		return r
	}
	if errors.Is(get.Err(), redis.Nil) || strings.HasPrefix(get.Val(), protocol.TombstonePrefix) {
		return r // free (a tombstone is free for every other token)
	}
	r.holder, _ = protocol.Holding(get.Val())
	r.ttl = pttl.Val()
	if r.ttl >= 0 {
		r.ttl = r.ttl.Truncate(time.Millisecond)
	}
	return r
}

// printKeyRows prints one line per node.
func printKeyRows(out io.Writer, names []string, rows []keyRow) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "node\tholder\towner\tttl\tfence\tstate\n")
	for i, r := range rows {
		switch {
		case r.err != nil:
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\terror: %s\n", names[i], oneLine(r.err.Error()))
		case r.holder == "":
			fmt.Fprintf(tw, "%s\t(free)\t-\t-\t%s\t%s\n", names[i], r.state.fenceColumn(), r.state)
		default:
			ttl := r.ttl.String()
			if r.ttl < 0 {
				ttl = "none (not a lock)"
			}
			owner := protocol.Owner(r.holder)
			if owner == "" {
				owner = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", names[i], short(r.holder), owner, ttl, r.state.fenceColumn(), r.state)
		}
	}
	return tw.Flush()
}

// verdict says whether a quorum (N/2+1) of the nodes agrees on one holder of
// key. It counts only the nodes that could be read and are in service. The
// nodes that could not be read may hold the key for anyone. So may those in
// their restart guard, whose data may lack the key or keep an old holder's.
// The library's reads skip them too.
func verdict(key string, rows []keyRow) string {
	quorum := len(rows)/2 + 1
	votes := map[string]int{}
	down, guarded := 0, 0
	for _, r := range rows {
		switch {
		case r.err != nil:
			down++
		case r.state.guardLeft > 0:
			guarded++
		case r.holder != "":
			votes[r.holder]++
		}
	}
	notRead := notCounted(down, guarded)
	down += guarded
	best, bestN := "", 0
	for h, n := range votes {
		if n > bestN {
			best, bestN = h, n
		}
	}
	switch {
	case bestN >= quorum:
		return fmt.Sprintf("held: %d of %d nodes agree on holder %s (quorum %d)", bestN, len(rows), short(best), quorum)
	case bestN+down >= quorum && bestN > 0:
		return fmt.Sprintf("unknown: %d of %d nodes agree on holder %s, %d needed, and %s could make it", bestN, len(rows), short(best), quorum, notRead)
	case bestN+down >= quorum:
		return fmt.Sprintf("unknown: no node read holds %q, and %s could make the quorum of %d", key, notRead, quorum)
	case bestN == 0 && down == 0:
		return fmt.Sprintf("free: no node holds %q", key)
	case bestN == 0:
		return fmt.Sprintf("not held: no node read holds %q, and %s cannot make the quorum of %d", key, notRead, quorum)
	case down > 0:
		return fmt.Sprintf("no quorum: at most %d of %d nodes agree on one holder, %d needed, even counting %s", bestN, len(rows), quorum, notRead)
	default:
		return fmt.Sprintf("no quorum: at most %d of %d nodes agree on one holder, %d needed (a lock round in progress, or leftovers that expire with their TTL)", bestN, len(rows), quorum)
	}
}

// nodeCount is "1 node" or "n nodes".
func nodeCount(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}

// notCounted names the nodes a verdict cannot count. down could not be
// read, and guarded are in their restart guard.
func notCounted(down, guarded int) string {
	switch {
	case guarded == 0:
		return "the " + nodeCount(down) + " not read"
	case down == 0 && guarded == 1:
		return "the 1 node in its restart guard"
	case down == 0:
		return "the " + nodeCount(guarded) + " in their restart guard"
	default:
		return fmt.Sprintf("the %s not read and the %d in their restart guard", nodeCount(down), guarded)
	}
}

// short shortens a token for display.
func short(tok string) string {
	if len(tok) <= 10 {
		return tok
	}
	return tok[:8] + "…"
}

// parseOne parses args with fs for a command that takes --nodes and
// exactly one non-empty positional argument. Errors call that argument what.
func parseOne(fs flags, args []string, what string, nodes *string) ([]string, error) {
	pos, err := parse(fs, args)
	switch {
	case err != nil:
		return nil, err
	case len(pos) != 1:
		return nil, usagef("want exactly one %s, got %d arguments", what, len(pos))
	case pos[0] == "":
		return nil, usagef("empty %s", what)
	case *nodes == "":
		return nil, usagef("--nodes is required")
	}
	return pos, nil
}
