package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/redlock"
)

const guardUsage = `usage:
  redlock guard status --nodes NODE,... [--prefix P] [--wait [--timeout D] [--fencing]]
  redlock guard end    --nodes NODE,... [--prefix P] [--yes]
  redlock guard fence  --nodes NODE,... [--prefix P] [--at-least N] [--yes]

status shows each node's restart guard, or waits until every node serves
locks again (--wait, for a rolling restart); end ends it at once on nodes you
vouch for; fence repairs the fence counters after a quorum of nodes lost
them. Run "redlock guard end -h" or "redlock guard fence -h" first.
` + nodeHelp

const guardStatusAbout = `Shows each node's state: "serving", "guarded for Ns" (the node refuses
locks for that long, by its own clock), "no state (new or lost its data)"
(the next lock request starts its guard), and "fence unknown" for a node
that serves without a fence counter because it lost its data.

With --wait it waits until every given node is in service, then shows the
states and exits 0; after --timeout it exits 1 naming each node that is not.
A node is in service when its guard has ended and its state was recorded by
the server that runs now: a server restarted since the lock clients last
connected to it is not, since its guard starts at their next request. So
--wait needs a lock client that makes requests while it waits. With
--fencing a node must also know its fence counter, which the next fenced
lock it grants writes back. Restart the next node only once it exits 0.

`

const guardEndAbout = `Ends the restart guard on every given node, so that the nodes grant locks
at once instead of when their guards run out. The guard keeps out a node
that lost its data (a restart without persistence, FLUSHALL), because it
may have forgotten locks that are still held; end it only when you vouch
that no lock taken before the loss is still in use: a development reset
with FLUSHALL, or a deployment that came up with a node missing.

It first checks every node and refuses, changing nothing on any node, when
a node cannot be reached, when a node is a Redis Cluster node (its guard is
one state per hash slot, which cannot be ended from here), or when a node
holds a live lock key: a key under the prefix with a TTL that is neither a
node state nor a tombstone, so a lock may be held. Give every node of the
deployment in --nodes.

On each node it sets the field g of the state key (prefix + "` + protocol.StateKey + `")
to 0, records the server's run_id and replication ID (INFO) in the fields
p and r, so that the clients take the server for the one the state belongs
to, clears the mark v, and keeps the field id. It does not set the fence counter f: a node
that lost its data keeps an unknown counter ("fence unknown"), does not
count toward a fenced lock's quorum, and gets its counter back from the
next fenced lock it grants, as long as a quorum of the nodes kept theirs.
When a quorum lost them (FLUSHALL on every node), fenced locks fail until
you run "redlock guard fence".

Without --yes it only shows what it would do, and exits with status 1.

`

// guard runs "redlock guard SUBCOMMAND".
func guard(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 {
		return usagef("want a subcommand: status, end or fence")
	}
	switch args[0] {
	case "status":
		return guardStatus(ctx, args[1:], out)
	case "end":
		return guardEnd(ctx, args[1:], out)
	case "fence":
		return guardFence(ctx, args[1:], out)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(out, guardUsage)
		return flag.ErrHelp
	}
	return usagef("unknown subcommand %q (want status, end or fence)", args[0])
}

// guardArgs are the flags of a guard subcommand.
type guardArgs struct {
	addrs   []string // as given, for redlock.NewNodes
	names   []string // the nodes' host:port, for the output
	prefix  string
	yes     bool
	atLeast uint64 // fence: the lowest counter to set, less one
	// wait, timeout and fencing are for status --wait. It waits at most
	// timeout until every node is in service, and with fencing, until
	// every node knows its fence counter.
	wait    bool
	timeout time.Duration
	fencing bool
}

// parseGuard parses the flags of the guard subcommand sub.
func parseGuard(sub, about string, args []string, out io.Writer) (guardArgs, error) {
	synopsis := "--nodes NODE,... [--prefix P]"
	switch sub {
	case "status":
		synopsis += " [--wait [--timeout D] [--fencing]]"
	case "fence":
		synopsis += " [--at-least N] [--yes]"
	case "end":
		synopsis += " [--yes]"
	}
	fs := newFlags("guard "+sub, synopsis, out)
	fs.about = about
	nodesFlag := fs.String("nodes", "", nodesUsage+" (required): every node of the deployment")
	prefix := fs.String("prefix", "", "the Options.KeyPrefix of the locking clients")
	yes, atLeast := new(bool), new(uint64)
	if sub != "status" {
		yes = fs.Bool("yes", false, "change the nodes; without it, only show what would change")
	}
	if sub == "fence" {
		atLeast = fs.Uint64("at-least", 0, "the highest fence any protected resource has accepted, if known")
	}
	wait, fencing, timeout := new(bool), new(bool), new(time.Duration)
	if sub == "status" {
		wait = fs.Bool("wait", false, "wait until every node is in service again (see above)")
		timeout = fs.Duration("timeout", 2*time.Hour, "with --wait, how long to wait before giving up")
		fencing = fs.Bool("fencing", false, "with --wait, also wait until every node knows its fence counter (clients with Options.Fencing)")
	}
	pos, err := parse(fs, args)
	switch {
	case err != nil:
		return guardArgs{}, err
	case len(pos) > 0:
		return guardArgs{}, usagef("unexpected argument %q", pos[0])
	case *nodesFlag == "":
		return guardArgs{}, usagef("--nodes is required")
	case !*wait && (set(fs, "timeout") || *fencing):
		return guardArgs{}, usagef("--timeout and --fencing go with --wait")
	case *wait && *timeout <= 0:
		return guardArgs{}, usagef("--timeout must be positive, not %v", *timeout)
	}
	addrs, names, err := parseNodes(*nodesFlag)
	return guardArgs{addrs: addrs, names: names, prefix: *prefix, yes: *yes, atLeast: *atLeast,
		wait: *wait, timeout: *timeout, fencing: *fencing}, err
}

// set reports whether the flag name was given on the command line.
func set(fs flags, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// guardStatus shows each node's state.
func guardStatus(ctx context.Context, args []string, out io.Writer) error {
	a, err := parseGuard("status", guardStatusAbout, args, out)
	if err != nil {
		return err
	}
	nodes := redlock.NewNodes(a.addrs...)
	defer closeNodes(nodes)
	var waited error
	if a.wait {
		waited = waitInService(ctx, nodes, a.names, a.prefix+protocol.StateKey, a.fencing, a.timeout, guardWaitPoll, out)
	}
	checks := checkNodes(ctx, nodes, a.prefix, false)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "node\tstate\n")
	var failed error
	for i, c := range checks {
		fmt.Fprintf(tw, "%s\t%s\n", a.names[i], c.stateText())
		if c.err != nil {
			failed = errors.Join(failed, fmt.Errorf("node %s: %w", a.names[i], c.err))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if waited != nil {
		return waited
	}
	if failed != nil {
		return fmt.Errorf("could not read every node: %v", failed)
	}
	return nil
}

// guardWaitPoll is how often guard status --wait reads the nodes.
const guardWaitPoll = 250 * time.Millisecond

// waitInService waits until every node serves locks (see notInService),
// reading each node every poll. It then returns nil. Once timeout has passed
// or ctx is done, it returns an error that names each node not in service,
// and why. Each time the nodes' reasons change, it writes them to progress
// in one line.
func waitInService(ctx context.Context, nodes []redis.UniversalClient, names []string, key string, fencing bool, timeout, poll time.Duration, progress io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	last := ""
	for {
		why := make([]string, len(nodes))
		eachNode(len(nodes), func(i int) {
			w, err := notInService(ctx, nodes[i], key, fencing)
			if err != nil {
				w = "unreadable: " + oneLine(err.Error())
			}
			if w != "" {
				why[i] = "node " + names[i] + " " + w
			}
		})
		waiting := strings.Join(slices.DeleteFunc(why, func(s string) bool { return s == "" }), "; ")
		if waiting == "" {
			return nil
		}
		if waiting != last {
			fmt.Fprintf(progress, "waiting: %s\n", waiting)
			last = waiting
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("not every node is in service after %v: %s", timeout, waiting)
		}
	}
}

// notInService returns "" when node n serves locks, or else why it does
// not. Its state key key may be missing: the next lock request starts its
// guard. Its guard may run. Its server may have changed since a lock client
// last checked it (see changedServer), so the next request starts the
// guard. It may be a replica. With fencing, its fence counter may be
// unknown. Where INFO cannot be read, the server is taken for the one the
// state records.
func notInService(ctx context.Context, n redis.UniversalClient, key string, fencing bool) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	var c stateCmds
	var info *redis.StringCmd
	_, _ = n.Pipelined(ctx, func(p redis.Pipeliner) error {
		c = queueState(ctx, p, key)
		info = p.Info(ctx, "server", "replication")
		return nil
	})
	s, err := c.state()
	if err != nil {
		return "", err
	}
	h := c.hash.Val()
	fields := infoFields(info.Val())
	switch {
	case s.bad != "":
		return s.String(), nil
	case fields["role"] != "" && fields["role"] != "master":
		return "is a " + fields["role"] + ", not a master", nil
	case !s.known:
		return "has no state (new or lost its data): its guard starts at the next lock request", nil
	case s.guardLeft > 0:
		return "is " + s.String(), nil
	case changedServer(h, fields):
		return "runs a server that no lock client has checked since it started: its guard starts at the next lock request", nil
	case fencing && s.fence == "":
		return "serves without a fence counter: the next fenced lock it grants sets it", nil
	}
	return "", nil
}

// changedServer reports whether the connection check (check.lua) will
// start the guard of the server whose INFO fields are info. Its state is h.
// The check starts it when another process recorded the state (run_id p).
// It also starts it when this process was a replica since: r differs and
// master_replid2 is set. Unknown fields change nothing.
func changedServer(h, info map[string]string) bool {
	run, id, id2 := info["run_id"], info["master_replid"], info["master_replid2"]
	moved := h["p"] != "" && run != "" && h["p"] != run
	promoted := h["r"] != "" && h["r"] != "?" && id != "" && h["r"] != id && strings.Trim(id2, "0") != ""
	return moved || promoted
}

// infoFields returns the "name:value" lines of an INFO reply.
func infoFields(info string) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}

// guardEnd checks every node. With --yes it then ends the guard on each.
func guardEnd(ctx context.Context, args []string, out io.Writer) error {
	a, err := parseGuard("end", guardEndAbout, args, out)
	if err != nil {
		return err
	}
	nodes := redlock.NewNodes(a.addrs...)
	defer closeNodes(nodes)
	checks := checkNodes(ctx, nodes, a.prefix, true)
	states, actions := make([]string, len(checks)), make([]string, len(checks))
	if err := refusal(a.names, checks); err != nil {
		for i, c := range checks {
			states[i], actions[i] = c.stateText(), "unchanged"
			switch p := c.problem(); {
			case c.err != nil:
				actions[i] = "refused: unreachable" // the state column shows the error
			case p != "":
				actions[i] = "refused: " + p
			}
		}
		if perr := printGuardRows(out, a.names, states, actions); perr != nil {
			return perr
		}
		return err
	}
	for i, c := range checks {
		states[i], actions[i] = c.stateText(), "would set serving"
	}
	if !a.yes {
		if err := printGuardRows(out, a.names, states, actions); err != nil {
			return err
		}
		fmt.Fprint(out, fenceNote(checks))
		return fmt.Errorf("nothing changed: add --yes to end the restart guard on these %d nodes", len(nodes))
	}
	return endGuards(ctx, out, a, nodes, checks)
}

// refusal returns why guard end must change nothing, naming each node
// against it. It returns nil when every node passed its checks.
func refusal(names []string, checks []nodeCheck) error {
	var problems []string
	live := false
	for i, c := range checks {
		if p := c.problem(); p != "" {
			problems = append(problems, "node "+names[i]+" "+p)
			live = live || c.live != ""
		}
	}
	if problems == nil {
		return nil
	}
	msg := "refused, nothing changed on any node: " + strings.Join(problems, "; ")
	if live {
		msg += "; a live lock key means a lock may be held that a node which lost its data forgot: wait until it expires or is released"
	}
	return errors.New(msg)
}

// endGuards sets every node serving and shows the states it then reads.
func endGuards(ctx context.Context, out io.Writer, a guardArgs, nodes []redis.UniversalClient, checks []nodeCheck) error {
	key := a.prefix + protocol.StateKey
	states, actions := make([]string, len(nodes)), make([]string, len(nodes))
	errs := make([]error, len(nodes))
	eachNode(len(nodes), func(i int) {
		hctx, cancel := context.WithTimeout(ctx, opTimeout)
		err := endGuard(hctx, nodes[i], key)
		cancel()
		actions[i] = "not changed"
		var s nodeState
		if err == nil {
			actions[i] = "set serving (was " + checks[i].state.String() + ")"
			s, err = readState(ctx, nodes[i], key)
		}
		states[i] = s.String()
		if err != nil {
			states[i] = "error: " + oneLine(err.Error())
			errs[i] = fmt.Errorf("node %s: %w", a.names[i], err)
		}
	})
	var failed error
	ended := 0
	for i, err := range errs {
		failed = errors.Join(failed, err)
		if strings.HasPrefix(actions[i], "set serving") {
			ended++
		}
	}
	if err := printGuardRows(out, a.names, states, actions); err != nil {
		return err
	}
	fmt.Fprint(out, fenceNote(checks))
	if failed != nil {
		return fmt.Errorf("ended the guard on %d of %d nodes: %v", ended, len(nodes), failed)
	}
	return nil
}

// endGuard sets the node's state key serving and clears its mark. It
// records the server's run_id and replication ID in the state. The lock clients' connection check then
// takes the server for the one the state belongs to. Where INFO cannot tell
// them, endGuard removes the recorded ones, and the next check records them.
func endGuard(ctx context.Context, n redis.UniversalClient, key string) error {
	run, id := infoField(ctx, n, "server", "run_id"), infoField(ctx, n, "replication", "master_replid")
	_, err := n.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, key, "v")
		if run == "" || id == "" {
			p.HDel(ctx, key, "p", "r")
			p.HSet(ctx, key, "g", "0")
		} else {
			p.HSet(ctx, key, "g", "0", "p", run, "r", id)
		}
		return nil
	})
	return err
}

// infoField returns the field name of the INFO section of n. It returns ""
// when the field cannot be read.
func infoField(ctx context.Context, n redis.UniversalClient, section, name string) string {
	info, err := n.Info(ctx, section).Result()
	if err != nil {
		return ""
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// fenceNote returns a warning line when a quorum of the nodes have unknown
// fence counters. guard end leaves them unknown, and fenced locks then fail
// until an operator sets them. It returns "" otherwise.
func fenceNote(checks []nodeCheck) string {
	unknown := 0
	for _, c := range checks {
		if c.state.fence == "" {
			unknown++
		}
	}
	if unknown < len(checks)/2+1 {
		return ""
	}
	return fmt.Sprintf("note: %d of %d nodes have no fence counter, a quorum: fenced locks (Options.Fencing) fail until you run redlock guard fence (see redlock guard fence -h)\n", unknown, len(checks))
}

// printGuardRows prints one line per node. It shows the node's state, and
// what guard end did or would do there.
func printGuardRows(out io.Writer, names, states, actions []string) error {
	return printRows(out, "state", names, states, actions)
}

// printRows prints a table of one line per node. A line holds the node's
// address, its value in the column named column, and an action.
func printRows(out io.Writer, column string, names, values, actions []string) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "node\t%s\taction\n", column)
	for i := range names {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", names[i], values[i], actions[i])
	}
	return tw.Flush()
}
