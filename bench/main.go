// Command bench runs the redlock benchmark scenarios through redsync
// (github.com/go-redsync/redsync/v4, the most used Go Redlock) and through
// redquorum, on the same five native redis-server processes, in one run, and
// prints each figure with the ratio.
//
// It is a module of its own so that the library never depends on redsync.
// It starts and stops the servers itself; redis-server must be on PATH
// (scripts/ensure-redis-server.sh installs Debian's).
//
//	cd bench && go run . [--duration 5s] [--callers 8] [--slow-node 20ms] [--json FILE] [--svg FILE]
//
// --only and --impl narrow a run to some scenarios (by ID, comma-separated)
// or implementations (by name; one for each waiting strategy of redquorum,
// see waitings), and --cpuprofile and --memprofile write profiles of the whole run:
// for working on one figure. Such partial runs do not write results/ unless
// asked to.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
	"github.com/redquorum/redquorum/locktest/loadtest"
	"github.com/redquorum/redquorum/redlock"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx)
	if spec, ok, werr := loadtest.WorkerFromEnv(); ok {
		err = werr // one caller of a scenario whose callers are processes
		if err == nil {
			err = runWorker(ctx, spec)
		}
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// runWorker runs the caller of spec in this process. The worker finds its
// implementation by name, so the name alone must say everything that sets
// it apart, the waiting strategy included.
func runWorker(ctx context.Context, spec loadtest.WorkerSpec) error {
	im, err := implsNamed(allImpls(nodeTimeoutFromEnv()), []string{spec.Impl})
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return loadtest.RunWorker(ctx, im[0], spec)
}

// waitings are the waiting strategies that get implementations of their
// own, named after redquorum's with the suffix, and the scripts each sends
// to the bench's nodes (plain, without fencing; see redlock's
// config.protocol). redquorum and redquorum-user wait with WaitDefault,
// which is WaitHandoff on such nodes; the "-handoff" ones pin that
// strategy.
var waitings = []struct {
	suffix   string
	w        redlock.Waiting
	strategy protocol.Strategy
}{{"-backoff", redlock.WaitBackoff, protocol.Announce}, {"-inline", redlock.WaitInLine, protocol.InLine}, {"-handoff", redlock.WaitHandoff, protocol.Handoff}}

// strategyOf returns the strategy of the scripts that the implementation
// name sends, and false when it is not redquorum.
func strategyOf(name string) (protocol.Strategy, bool) {
	if !strings.HasPrefix(name, "redquorum") {
		return 0, false
	}
	for _, wt := range waitings {
		if strings.HasSuffix(name, wt.suffix) {
			return wt.strategy, true
		}
	}
	return protocol.Handoff, true
}

// nodeTimeoutEnv carries --node-timeout to the worker processes of a
// scenario whose callers are processes, which inherit the environment.
const nodeTimeoutEnv = "REDQUORUM_BENCH_NODE_TIMEOUT"

// nodeTimeoutFromEnv returns redquorum's options with --node-timeout as
// nodeTimeoutEnv carries it, nil for the defaults.
func nodeTimeoutFromEnv() *redlock.Options {
	d, err := time.ParseDuration(os.Getenv(nodeTimeoutEnv))
	if err != nil || d <= 0 {
		return nil
	}
	return &redlock.Options{NodeTimeout: d}
}

// allImpls returns every implementation the bench knows, redquorum's with
// opts (nil for the defaults; its NodeTimeout also bounds the bare ones'
// calls).
func allImpls(opts *redlock.Options) []loadtest.Impl {
	var o redlock.Options
	if opts != nil {
		o = *opts
	}
	timeout := cmp.Or(o.NodeTimeout, redlock.DefaultNodeTimeout)
	impls := []loadtest.Impl{redsyncImpl(), loadtest.Redquorum(opts), loadtest.RedquorumUser(opts)}
	for _, wt := range waitings {
		ow := o
		ow.Waiting = wt.w
		for _, im := range []loadtest.Impl{loadtest.Redquorum(&ow), loadtest.RedquorumUser(&ow)} {
			im.Name += wt.suffix
			impls = append(impls, im)
		}
	}
	impls = append(impls, semaphoreImpls(opts)...)
	return append(impls, bareImpl("bare-scripts", bareScripts, timeout), bareImpl("bare-min", bareMin, timeout),
		bareImpl("bare-pipe", barePipe, timeout), bareImpl("bare-noop", bareNoop, timeout))
}

// implsNamed returns the implementations of all named by names, in that
// order.
func implsNamed(all []loadtest.Impl, names []string) ([]loadtest.Impl, error) {
	var impls []loadtest.Impl
	for _, name := range names {
		i := slices.IndexFunc(all, func(i loadtest.Impl) bool { return i.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("no implementation %q: want one of %s", name, implNames(all))
		}
		impls = append(impls, all[i])
	}
	return impls, nil
}

// implNames returns the names of impls, comma-separated.
func implNames(impls []loadtest.Impl) string {
	names := make([]string, len(impls))
	for i, im := range impls {
		names[i] = im.Name
	}
	return strings.Join(names, ", ")
}

func run(ctx context.Context) error {
	if _, worker, _ := loadtest.WorkerFromEnv(); worker {
		return nil // main runs the worker
	}
	duration := flag.Duration("duration", 5*time.Second, "measured time per scenario and implementation")
	callers := flag.Int("callers", 8, "concurrent callers in the multi-caller and hot-key scenarios")
	slow := flag.Duration("slow-node", 20*time.Millisecond, "latency added each way in front of one node in the slow-node scenario (0: skip it)")
	nodes := flag.Int("nodes", 5, "redis-server processes to start")
	jsonFile := flag.String("json", "results/latest.json", "write the results as JSON here (empty: don't)")
	svgFile := flag.String("svg", "results/latest.svg", "write the latency plot here (empty: don't)")
	mdFile := flag.String("md", "results/latest.md", "write the comparison table (Markdown) here (empty: don't)")
	rounds := flag.Int("rounds", 3, "split each scenario into this many short runs per library, alternating the libraries, and pool them (so that both see the same drift in machine load)")
	only := flag.String("only", "", "run only these scenarios, by ID, comma-separated (distinct-1, distinct-8, hotkey-8, hotkey-8-clients, hotkey-8-procs, hotkey-8-clients-down, shared-8-clients, slow-1)")
	implName := flag.String("impl", "", "run only these, comma-separated, and compare each to the first: "+implNames(allImpls(nil))+". redquorum-user is redquorum on node clients built as a user would (loadtest.UserClients); a suffix -backoff, -inline or -handoff sets Options.Waiting (none: WaitDefault, here WaitHandoff); the bare- ones are floors, not locks (see bare.go; 1-caller scenario only)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the run here")
	memProfile := flag.String("memprofile", "", "write an allocation profile of the run here")
	holdBlocking := flag.Bool("hold-blocking", false, "diagnostic: the hot-key and shared-key holders block their thread in the kernel (nanosleep) for their 1 ms instead of sleeping on a Go timer, which waits in whole milliseconds once the process is woken during the sleep (see loadtest.Scenario.HoldBlocking)")
	election := flag.Int("election", 0, "instead of the scenarios: measure this many election failovers after a resign and as many after the leader's process died (see election.go)")
	electionTTL := flag.Duration("election-ttl", time.Second, "the leadership's TTL for --election")
	nodeTimeout := flag.Duration("node-timeout", 0, "redquorum's Options.NodeTimeout, the bound of each node call (0: the default, "+redlock.DefaultNodeTimeout.String()+"); redsync keeps its defaults")
	commands := flag.Bool("commands", false, "count the commands the nodes run per operation, by name (INFO commandstats, reset at each measured phase), and print them under the table")
	lineWaiters := flag.String("line-waiters", "7", "with --node-instructions: the waiters in the hot key's line for the contended counts, comma-separated (one set of counts for each)")
	instr := flag.Int("node-instructions", 0, "instead of the scenarios: count the instructions one redis-server runs per lock+unlock, over this many operations, under valgrind's callgrind (see instr.go)")
	flag.Parse()
	partial := *only != "" || *implName != ""
	if partial && !isSet("json") && !isSet("svg") && !isSet("md") {
		*jsonFile, *svgFile, *mdFile = "", "", "" // keep results/ for full runs
	}
	if *duration <= 0 || *callers < 1 || *slow < 0 || *nodes < 1 || *rounds < 1 || *nodeTimeout < 0 {
		return errors.New("--duration must be positive, --callers, --nodes and --rounds at least 1, --slow-node and --node-timeout not negative")
	}
	if *nodeTimeout > 0 {
		if err := os.Setenv(nodeTimeoutEnv, nodeTimeout.String()); err != nil {
			return err
		}
	}

	if *election > 0 {
		return electionFailover(ctx, *nodes, *election, *electionTTL)
	}
	if *instr > 0 {
		names := []string{"redsync", "redquorum", "bare-min"}
		if *implName != "" {
			names = strings.Split(*implName, ",")
		}
		var waiters []int
		for _, f := range strings.Split(*lineWaiters, ",") {
			w, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || w < 1 {
				return fmt.Errorf("--line-waiters: %q is not a positive number", f)
			}
			waiters = append(waiters, w)
		}
		return nodeInstructions(ctx, names, *instr, waiters)
	}
	impls := allImpls(nodeTimeoutFromEnv())[:2]
	if *implName != "" {
		var err error
		if impls, err = implsNamed(allImpls(nodeTimeoutFromEnv()), strings.Split(*implName, ",")); err != nil {
			return fmt.Errorf("--impl: %w", err)
		}
	}
	srv, err := redisproc.Start(ctx, *nodes)
	if err != nil {
		return err
	}
	defer srv.Stop()
	env := loadtest.Environment()
	env["redis-server"] = srv.Version
	fmt.Printf("%d redis-server %s on 127.0.0.1, %v per scenario; %s, %s cpus, %s\n\n", *nodes, srv.Version, *duration, env["cpu"], env["cpus"], env["go"])

	scenarios := loadtest.Scenarios(*duration, *callers, *slow)
	for i := range scenarios {
		if *holdBlocking && scenarios[i].Hold > 0 {
			scenarios[i].HoldBlocking = true
			scenarios[i].Title += ", blocking hold"
		}
	}
	if *only != "" {
		ids := strings.Split(*only, ",")
		for _, id := range ids {
			if !slices.ContainsFunc(scenarios, func(s loadtest.Scenario) bool { return s.ID == id }) {
				return fmt.Errorf("--only: no scenario %q", id)
			}
		}
		scenarios = slices.DeleteFunc(scenarios, func(s loadtest.Scenario) bool { return !slices.Contains(ids, s.ID) })
	}
	for _, im := range impls {
		if strings.HasPrefix(im.Name, "bare-") && slices.ContainsFunc(scenarios, func(s loadtest.Scenario) bool { return s.ID != "distinct-1" }) {
			return fmt.Errorf("--impl %s: not a lock (it never waits for a key), only for --only distinct-1", im.Name)
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if *memProfile != "" {
		runtime.MemProfileRate = 4096
		defer func() {
			if f, err := os.Create(*memProfile); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				_ = f.Close()
			}
		}()
	}
	runner := &loadtest.Runner{Progress: os.Stderr, MeasureAllocs: true, NodePIDs: srv.PIDs(), CountCommands: *commands,
		Spawn: func(ctx context.Context) *exec.Cmd { return exec.CommandContext(ctx, os.Args[0]) }}
	var results []loadtest.Result
	for _, sc := range scenarios {
		total := sc.Duration
		sc.Duration = total / time.Duration(*rounds)
		parts := make([][]loadtest.Result, len(impls))
		for round := range *rounds {
			for k := range impls {
				j := k
				if round%2 == 1 {
					j = len(impls) - 1 - k // alternate who goes first
				}
				r, err := runner.Run(ctx, impls[j], sc, srv.Addrs)
				if err != nil {
					return err
				}
				if ctx.Err() != nil {
					return ctx.Err()
				}
				parts[j] = append(parts[j], r)
			}
		}
		for j := range impls {
			results = append(results, loadtest.Merge(parts[j]))
		}
	}
	fmt.Println()
	if err := loadtest.WriteTable(os.Stdout, results); err != nil {
		return err
	}
	fmt.Println()
	if *commands {
		fmt.Println("Commands per operation, summed over the nodes (server µs per call):")
		for _, r := range results {
			fmt.Printf("  %s, %s: %v\n", r.Impl, r.Title, r.Commands)
		}
		fmt.Println()
	}
	var table strings.Builder
	if len(impls) >= 2 { // each figure of the others against the first
		var ours []string
		for _, im := range impls[1:] {
			ours = append(ours, im.Name)
		}
		compare(&table, results, impls[0].Name, ours...)
	}
	fmt.Print(table.String())
	if *mdFile != "" {
		if err := os.WriteFile(*mdFile, []byte(table.String()), 0o644); err != nil {
			return err
		}
	}
	if *jsonFile != "" {
		cmd := "cd bench && go run . " + fmt.Sprintf("--duration %v --rounds %d --callers %d --slow-node %v", *duration, *rounds, *callers, *slow)
		for _, f := range []struct{ name, v string }{{"impl", *implName}, {"only", *only}} {
			if f.v != "" {
				cmd += fmt.Sprintf(" --%s %s", f.name, f.v)
			}
		}
		if *holdBlocking {
			cmd += " --hold-blocking"
		}
		if *nodeTimeout > 0 {
			cmd += fmt.Sprintf(" --node-timeout %v", *nodeTimeout)
		}
		if *commands {
			cmd += " --commands"
		}
		if err := loadtest.WriteJSON(*jsonFile, loadtest.Report{Env: env, Command: cmd, Results: results}); err != nil {
			return err
		}
	}
	if *svgFile != "" {
		title := fmt.Sprintf("redsync vs redquorum, %d local redis-server, %s cpus", *nodes, env["cpus"])
		if err := loadtest.WriteSVG(*svgFile, title, results); err != nil {
			return err
		}
	}
	return nil
}

// redsyncImpl is redsync with its defaults (as its README shows them) on
// plain go-redis clients; only the expiry follows the scenario.
func redsyncImpl() loadtest.Impl {
	return loadtest.Impl{Name: "redsync", New: func(addrs []string) (loadtest.Locker, func(), error) {
		clients := loadtest.NodeClients(addrs)
		pools := make([]redsyncredis.Pool, len(clients))
		for i, c := range clients {
			pools[i] = goredis.NewPool(c)
		}
		closeAll := func() {
			for _, c := range clients {
				_ = c.Close()
			}
		}
		return redsyncLocker{redsync.New(pools...)}, closeAll, nil
	}}
}

type redsyncLocker struct{ rs *redsync.Redsync }

func (r redsyncLocker) Lock(ctx context.Context, key string, ttl time.Duration) (loadtest.Unlocker, error) {
	m := r.rs.NewMutex(key, redsync.WithExpiry(ttl))
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return redsyncUnlocker{m}, nil
}

type redsyncUnlocker struct{ m *redsync.Mutex }

func (u redsyncUnlocker) Unlock(ctx context.Context) error {
	ok, err := u.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock returned false")
	}
	return err
}

// isSet reports whether the flag was given on the command line.
func isSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
