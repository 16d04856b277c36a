package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/redquorum/redquorum/redlock"
)

// election shows the leader of the election NAME as a quorum of nodes
// agree. It shows the leader's owner, term, TTL and value, or that nobody
// leads. With --watch it prints one line per change until interrupted.
func election(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlags("election", "NAME --nodes NODE,... [--prefix P] [--watch]", out)
	fs.about = "Shows the leader of an election as a quorum of nodes agree. It changes\nnothing on the nodes but what a new connection's check records.\n\n"
	nodesFlag := fs.String("nodes", "", nodesUsage+" (required)")
	prefix := fs.String("prefix", "", "the Options.KeyPrefix of the campaigning clients")
	watch := fs.Bool("watch", false, "print every change of leader, term or value until interrupted")
	pos, err := parseOne(fs, args, "NAME", nodesFlag)
	if err != nil {
		return err
	}
	addrs, _, err := parseNodes(*nodesFlag)
	if err != nil {
		return err
	}
	c, err := redlock.Open(addrs, &redlock.Options{KeyPrefix: *prefix, NodeTimeout: opTimeout})
	if err != nil {
		return err
	}
	defer c.Close()
	e := c.Election(pos[0])
	if !*watch {
		info, err := e.Leader(ctx)
		if err != nil && !errors.Is(err, redlock.ErrNoLeader) {
			return err
		}
		fmt.Fprintln(out, leaderLine(e.Name(), info))
		return nil
	}
	for info := range e.Observe(ctx) {
		fmt.Fprintf(out, "%s %s\n", time.Now().Format("15:04:05.000"), leaderLine(e.Name(), info))
	}
	return nil
}

// leaderLine describes info, the leader of the election name.
func leaderLine(name string, info redlock.LeaderInfo) string {
	if info.Term == 0 {
		return fmt.Sprintf("election %q: no leader", name)
	}
	owner := info.Owner
	if owner == "" {
		owner = "-"
	}
	return fmt.Sprintf("election %q: leader %s, term %d, ttl %v, value %q", name, owner, info.Term, info.TTL.Truncate(time.Millisecond), info.Value)
}
