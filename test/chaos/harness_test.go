package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/locktest"
	"github.com/redquorum/redquorum/locktest/linearize"
	"github.com/redquorum/redquorum/locktest/rig"
	"github.com/redquorum/redquorum/redlock"
)

// childEnv carries a contender process's configuration (JSON) to the
// re-executed test binary; see TestMain.
const childEnv = "REDQUORUM_CHAOS_CHILD"

func TestMain(m *testing.M) {
	if cfg := os.Getenv(childEnv); cfg != "" {
		os.Exit(child(cfg))
	}
	if cfg := os.Getenv(candidateEnv); cfg != "" {
		os.Exit(candidateChild(cfg))
	}
	if cfg := os.Getenv(permitEnv); cfg != "" {
		os.Exit(permitChild(cfg))
	}
	code := m.Run()
	removePrevious()
	os.Exit(code)
}

// FaultKind is one kind of fault the schedule injects into a lock node
// (locktest.FaultKind). Failover fails a replicated node over to its
// replica (rig's Node.Failover): the replica is promoted while the
// contenders keep locking on the old master for a random lag of
// Options.FailoverLag/10 to FailoverLag, so that the promoted replica lacks
// what was granted and extended in that time. It needs Options.Replicated.
type FaultKind = locktest.FaultKind

// The kinds of fault.
const (
	Kill            = locktest.Kill
	Pause           = locktest.Pause
	Partition       = locktest.Partition
	ClientPartition = locktest.ClientPartition
	Latency         = locktest.Latency
	Failover        = locktest.Failover
)

// AllFaults is every kind of fault that needs no replicas, for the schedule
// of the main suite.
var AllFaults = locktest.AllFaults()

// ReplicatedFaults is every kind of fault, for a replicated run: AllFaults
// and Failover.
var ReplicatedFaults = locktest.ReplicatedFaults()

// Options configures [Run]. The zero value of a field means its default.
type Options struct {
	// parallel is set for a run in a parallel subtest, whose parent checks
	// for leaked goroutines once both of its runs are done
	// (leakcheck.Check counts every goroutine of the process).
	parallel bool
	Nodes    int           // lock nodes (5); one more node holds the shared resource and is never faulted
	Procs    int           // contender OS processes, this test's one included (2)
	Workers  int           // contender goroutines per process (4)
	Keys     int           // lock keys the contenders compete for (8)
	TTL      time.Duration // lock TTL (600ms)
	Hold     time.Duration // longest sleep between reading and writing the stock (1ms)

	// Target is how many successful acquisitions, over all processes, end
	// the run once MinDuration has passed (10000). The run also ends at
	// MaxDuration (5m); [Result.Acquisitions] says whether the target was met.
	Target                   int
	MinDuration, MaxDuration time.Duration

	// Faults are the kinds the schedule picks from, at random; none when
	// empty. At most MaxFaulty nodes ((Nodes-1)/2, a minority) are faulted
	// at once; a fault lasts 100 ms to 1 s, and a new one is considered
	// every FaultGap (300 ms) on average.
	Faults    []FaultKind
	MaxFaulty int
	FaultGap  time.Duration
	// FaultNodes limits the schedule to these lock nodes (indices); all
	// when empty.
	FaultNodes []int
	// KillDowntime is how long a killed node stays down before it starts
	// again without its data (TTL + 500 ms: longer than any hold, so a lost
	// key never matters). Set it below TTL, with a negative value meaning
	// zero, to test a node that forgets a lock while it is held.
	KillDowntime time.Duration
	// Replicated gives every lock node a replica (rig.WithReplicas), which
	// the Failover fault needs. The leftover check then also lists the
	// replicas' keys.
	Replicated bool
	// FailoverLag is the longest lag of a Failover (500ms): how long the old
	// master keeps taking writes that the promoted replica lacks.
	FailoverLag time.Duration

	// Client is the redlock configuration of every contender. Only fields
	// that survive JSON (not Clock or Logger) reach the other processes.
	// NodeTimeout defaults to 200ms here, not redlock's 50ms: each request
	// crosses two in-process proxies and Docker's port forwarding on a
	// loaded two-core machine, and the suite is about safety under faults,
	// not about a round's speed. RestartGuard defaults to twice the TTL
	// (redlock's minute would keep every killed node out for the rest of
	// the run).
	Client redlock.Options
	// Waiting gives process p the strategy Waiting[p % len(Waiting)], so
	// that Clients that wait differently share the keys; every process
	// keeps Client.Waiting when it is empty.
	Waiting []redlock.Waiting
	// Previous lists the processes that run the chaos test binary of the
	// previous release (previousRelease) instead of this one, as during a
	// rolling deploy. Their Client is that release's, configured with the
	// fields of Client it knows. Process 0 is the test's own and always
	// runs this release.
	Previous []int
	// Split cuts process 0 off from the last Nodes/2 nodes and process 1
	// from the first Nodes/2 for the whole run (their connections are
	// refused): the two see different majorities. It needs Procs = 2. With
	// a majority quorum of all the nodes they still share a node.
	Split bool
	// OwnNodes, with Split, gives each process a Client over only the nodes
	// Split leaves it (with 5 nodes: 0, 1, 2 and 2, 3, 4), as if the two
	// were misconfigured with different node lists. Each Client's default
	// quorum is a majority of its own list (2 of 3), which redlock accepts,
	// but the two lists' majorities can be disjoint ({0, 1} and {3, 4}), so
	// both processes can hold one lock at once (negative controls).
	OwnNodes bool
	// Stock is the initial stock of each key in the oversell scenario (1<<30).
	Stock int64
	// Seed is the fault schedule's seed (locktest.Schedule.Seed); a failed
	// test logs the one it used.
	Seed uint64
}

func (o *Options) defaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Nodes, 5)
	def(&o.Procs, 2)
	def(&o.Workers, 4)
	def(&o.Keys, 8)
	def(&o.Target, 10000)
	def(&o.MaxFaulty, (o.Nodes-1)/2)
	defD(&o.TTL, 600*time.Millisecond)
	defD(&o.Client.NodeTimeout, 200*time.Millisecond)
	if !o.Client.UnsafeNoRestartGuard {
		defD(&o.Client.RestartGuard, 2*o.TTL)
	}
	defD(&o.Hold, time.Millisecond)
	defD(&o.MaxDuration, 5*time.Minute)
	defD(&o.FaultGap, 300*time.Millisecond)
	defD(&o.KillDowntime, o.TTL+500*time.Millisecond)
	defD(&o.FailoverLag, 500*time.Millisecond)
	o.KillDowntime = max(o.KillDowntime, 0)
	if o.Stock == 0 {
		o.Stock = 1 << 30
	}
}

// cutOff reports whether Split cuts process p off from lock node i: process 0
// from the last Nodes/2 nodes, process 1 from the first Nodes/2.
func (o *Options) cutOff(p, i int) bool {
	if !o.Split {
		return false
	}
	if p == 0 {
		return i >= o.Nodes-o.Nodes/2
	}
	return i < o.Nodes/2
}

// client returns the redlock configuration of process p.
func (o *Options) client(p int) redlock.Options {
	c := o.Client
	if len(o.Waiting) > 0 {
		c.Waiting = o.Waiting[p%len(o.Waiting)]
	}
	return c
}

// role names what process p runs, for the summary line: its Waiting, or the
// previous release.
func (o *Options) role(p int) string {
	if slices.Contains(o.Previous, p) {
		return "previous@" + previousRelease
	}
	return o.client(p).Waiting.String()
}

// Result is what a [Run] observed.
type Result struct {
	History      []locktest.Attempt
	Acquisitions int               // successful attempts
	Failures     int               // attempts that ended without the lock
	Faults       map[FaultKind]int // faults injected, by kind
	Duration     time.Duration     // of the contention

	Overlaps      []locktest.Overlap    // from locktest.CheckOverlaps
	Linearizable  porcupine.CheckResult // from linearize.CheckLock
	Visualization string                // porcupine's page of an illegal history
	Timeline      string                // locktest's timeline of a run with violations

	Sold, Left int64    // over all keys: sold counters and remaining stock
	Oversold   int64    // sold + left − keys·Stock: holds that overlapped on the resource
	MinStock   int64    // lowest stock any holder read
	Leftover   []string // "node: key" of every key found on a lock node once the TTLs had passed
	Resource   int      // reads and writes of the resource that failed (timeouts near Until)
	ByProc     []int    // successful acquisitions per process; [0] is this one
	Roles      []string // per process: its Waiting, or the previous release
	Refused    int      // pauses Docker refused to apply (not counted in Faults)

	LockWait, Held time.Duration // summed over contenders: time in Lock, and from Lock to the end of Unlock
}

// String is the summary line of the run: totals, faults and violations. It
// counts every kind of AllFaults, and the other kinds the run could inject.
func (r *Result) String() string {
	byProc := make([]string, len(r.ByProc))
	for p, n := range r.ByProc {
		byProc[p] = strconv.Itoa(n)
		if p < len(r.Roles) {
			byProc[p] = r.Roles[p] + "=" + byProc[p]
		}
	}
	return fmt.Sprintf("%d acquisitions (by process: %s), %d failed attempts in %v (%.0f/s; contenders spent %v in Lock, %v holding); faults: %s (refused by Docker: %d); violations: overlaps=%d oversold=%d porcupine=%s; leftover keys=%d; min stock=%d; resource errors=%d",
		r.Acquisitions, strings.Join(byProc, " "), r.Failures, r.Duration.Round(time.Millisecond), float64(r.Acquisitions)/r.Duration.Seconds(),
		r.LockWait.Round(time.Second), r.Held.Round(time.Second), faultSummary(r.Faults), r.Refused,
		len(r.Overlaps), r.Oversold, linearize.Verdict(r.Linearizable), len(r.Leftover), r.MinStock, r.Resource)
}

// procConfig is one contender process's part of a run. The previous
// release's child reads it too (Options.Previous), and encoding/json ignores
// the fields it does not know: add fields, never rename or retype one, here
// or in redlock.Options.
type procConfig struct {
	Proc        int
	Procs       int      // the run's contender processes, which start together
	Nodes       []string // the process's own view of the lock nodes
	Resource    string
	Keys        []string
	Workers     int
	TTL, Hold   time.Duration
	Target      int
	Start       time.Time
	MinDuration time.Duration
	MaxDuration time.Duration
	Client      redlock.Options
	Out         string // where a child writes its procResult
}

// procResult is what one contender process reports.
type procResult struct {
	History  []locktest.Attempt
	MinStock int64
	Resource int
	LockWait time.Duration // total time spent in Lock
	Held     time.Duration // total time between Lock and the end of Unlock
	Err      string        // a failure that ended the process early
}

// Run runs the chaos scenario of o on a fresh rig and returns what it found;
// the caller asserts. It prints a summary line on stdout, which `go test`
// shows when run in a package directory (the Makefile does so). It fails t
// for failures of the harness itself (Docker, child processes), never for
// violations.
func Run(t *testing.T, o Options) *Result {
	t.Helper()
	o.defaults()
	if o.Split && o.Procs != 2 {
		t.Fatalf("chaos: Split needs Procs = 2, not %d", o.Procs)
	}
	if o.OwnNodes && !o.Split {
		t.Fatal("chaos: OwnNodes needs Split")
	}
	if slices.Contains(o.Faults, Failover) && !o.Replicated {
		t.Fatal("chaos: the Failover fault needs Replicated")
	}
	var previous string // the previous release's binary
	for _, p := range o.Previous {
		if p < 1 || p >= o.Procs {
			t.Fatalf("chaos: Previous lists process %d; the previous release runs in processes 1 to %d", p, o.Procs-1)
		}
		previous = previousBinary(t)
	}
	if !o.parallel {
		leakcheck.Check(t)
	}
	var rigOpts []rig.Option
	if o.Replicated {
		rigOpts = append(rigOpts, rig.WithReplicas()) // the resource node's replica is never used
	}
	c := rig.Start(t, o.Nodes+1, rigOpts...)
	lockNodes, resNode := c.Nodes[:o.Nodes], c.Nodes[o.Nodes]

	views := proxies(t, o.Procs, lockNodes)
	if o.Split {
		// Connections are refused rather than stalled, so that a whole run
		// of split does not pile up stalled connections.
		for p, view := range views {
			for i, px := range view {
				if o.cutOff(p, i) {
					px.SetTarget("")
				}
			}
		}
	}

	ctx := t.Context()
	res := redis.NewClient(redlock.NodeOptions(resNode.Addr()))
	t.Cleanup(func() { res.Close() })
	keys := make([]string, o.Keys)
	for i := range keys {
		keys[i] = "chaos:" + strconv.Itoa(i)
		require.NoError(t, res.Set(ctx, "stock:"+keys[i], o.Stock, 0).Err())
		require.NoError(t, res.Set(ctx, "sold:"+keys[i], 0, 0).Err())
	}
	require.NoError(t, res.Set(ctx, "acquired", 0, 0).Err())

	var chaos *locktest.Chaos
	if len(o.Faults) > 0 {
		chaos = o.schedule(views).Start(t, targets(lockNodes)...)
	}

	start := time.Now()
	cfgs := make([]procConfig, o.Procs)
	dir := t.TempDir()
	for p := range cfgs {
		var addrs []string
		for i, px := range views[p] {
			if !o.OwnNodes || !o.cutOff(p, i) {
				addrs = append(addrs, px.Addr())
			}
		}
		cfgs[p] = procConfig{
			Proc: p, Procs: o.Procs, Nodes: addrs, Resource: resNode.Addr(), Keys: keys, Workers: o.Workers,
			TTL: o.TTL, Hold: o.Hold, Target: o.Target, Start: start,
			MinDuration: o.MinDuration, MaxDuration: o.MaxDuration,
			Client: o.client(p),
			Out:    filepath.Join(dir, fmt.Sprintf("proc%d.json", p)),
		}
	}
	kids := spawnKids(ctx, t, childEnv, cfgs[1:], func(p int) string {
		if slices.Contains(o.Previous, p) {
			return previous
		}
		return os.Args[0]
	})
	results := collect(t, kids, contend(ctx, cfgs[0]), func(p int) string { return cfgs[p].Out },
		func(p int) string { return fmt.Sprintf("contender process %d (%s)", p, o.role(p)) })
	r := &Result{Duration: time.Since(start), MinStock: o.Stock}
	var faults []locktest.Fault
	if chaos != nil {
		faults = chaos.Stop()
	}
	for _, p := range views {
		for _, px := range p {
			px.Heal()
		}
	}
	calm := time.Now() // no fault, no contender from here on
	// Schedule.Start fails t for the faults with an Err.
	for _, f := range faults {
		if f.Refused {
			r.Refused++
		}
	}
	r.Faults = locktest.Count(faults, o.Faults...) // the summary line shows every kind the run could inject
	for i, pr := range results {
		if pr.Err != "" {
			t.Errorf("chaos: contender process %d (%s): %s", i, o.role(i), pr.Err)
		}
		r.History = append(r.History, pr.History...)
		r.ByProc = append(r.ByProc, 0)
		if len(results) == o.Procs { // else a child failed, and the indices moved
			r.Roles = append(r.Roles, o.role(i))
		}
		for _, a := range pr.History {
			if a.OK {
				r.ByProc[i]++
			}
		}
		r.MinStock = min(r.MinStock, pr.MinStock)
		r.Resource += pr.Resource
		r.LockWait += pr.LockWait
		r.Held += pr.Held
	}
	for _, a := range r.History {
		if a.OK {
			r.Acquisitions++
		} else {
			r.Failures++
		}
	}

	t.Logf("contention over after %v; %d attempts", r.Duration, len(r.History))
	for _, k := range keys {
		sold, err1 := res.Get(ctx, "sold:"+k).Int64()
		left, err2 := res.Get(ctx, "stock:"+k).Int64()
		require.NoError(t, errors.Join(err1, err2))
		r.Sold += sold
		r.Left += left
		r.MinStock = min(r.MinStock, left)
	}
	r.Oversold = r.Sold + r.Left - int64(o.Keys)*o.Stock

	report := locktest.Check(r.History, faults)
	r.Overlaps = report.Overlaps
	var err error
	r.Linearizable, r.Visualization, err = linearize.CheckLock(r.History, time.Minute, t.ArtifactDir())
	require.NoError(t, err)
	if !report.OK() {
		r.Timeline = filepath.Join(t.ArtifactDir(), "timeline.svg")
		require.NoError(t, report.WriteTimeline(r.Timeline))
	}

	// Once every TTL set before calm has run out, no lock key may be left,
	// on a master or, once it has caught up, on its replica.
	time.Sleep(time.Until(calm.Add(o.TTL + 250*time.Millisecond)))
	for _, n := range lockNodes {
		r.Leftover = append(r.Leftover, lockKeys(t, n.Name(), n.Addr())...)
		if o.Replicated {
			require.NoError(t, n.WaitReplicated(ctx))
			r.Leftover = append(r.Leftover, lockKeys(t, n.Name()+" (replica)", n.ReplicaAddr())...)
		}
	}

	fmt.Printf("chaos: %s: %s\n", t.Name(), r)
	if r.Visualization != "" {
		fmt.Printf("chaos: %s: porcupine's visualization of the illegal history (kept with go test -artifacts): %s\n", t.Name(), r.Visualization)
	}
	if r.Timeline != "" {
		fmt.Printf("chaos: %s: timeline of holds, faults and overlaps (kept with go test -artifacts): %s\n", t.Name(), r.Timeline)
	}
	return r
}

// lockKeys returns "name: key" for every lock key on the server at addr: its
// keys but the node's state and the tombstones of releases.
func lockKeys(t *testing.T, name, addr string) []string {
	t.Helper()
	cl := redis.NewClient(redlock.NodeOptions(addr))
	defer cl.Close()
	ks, err := cl.Keys(t.Context(), "*").Result()
	require.NoError(t, err, "list the keys of %s", name)
	var out []string
	for _, k := range ks {
		if strings.HasPrefix(k, "redquorum:node") {
			continue // the node's state (restart guard, fences), not a lock
		}
		if v, _ := cl.Get(t.Context(), k).Result(); strings.HasPrefix(v, "redquorum:gone:") {
			continue // a release's tombstone: free for every other token
		}
		if strings.HasPrefix(k, protocol.LinePrefix) && cl.PTTL(t.Context(), k).Val() > 0 {
			continue // a line of waiters, which expires by itself
		}
		out = append(out, name+": "+k)
	}
	return out
}

// child runs one contender process from its JSON configuration and writes its
// result to cfg.Out. It returns the process's exit code.
func child(raw string) int {
	return runChild(raw, "chaos child", contend, func(c procConfig) string { return c.Out })
}

// runChild runs one child process of a run: it decodes its configuration
// from raw (JSON), runs it with run and writes the result, in JSON, to the
// file that out names. It returns the process's exit code, and reports a
// failure on stderr as what.
func runChild[C, R any](raw, what string, run func(context.Context, C) R, out func(C) string) int {
	var cfg C
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, what+":", err)
		return 2
	}
	b, err := json.Marshal(run(context.Background(), cfg))
	if err == nil {
		err = os.WriteFile(out(cfg), b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, what+":", err)
		return 1
	}
	return 0
}

// spawn starts bin, a chaos test binary, as a child process whose
// configuration cfg goes in JSON to the environment variable env. Its
// output goes to the returned buffer.
func spawn(ctx context.Context, t *testing.T, bin, env string, cfg any) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	b, err := json.Marshal(cfg)
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+string(b))
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	require.NoError(t, cmd.Start())
	return cmd, &buf
}

// kids are the child processes of a run, processes 1 and up, with their
// output.
type kids struct {
	cmds    []*exec.Cmd
	outputs []*bytes.Buffer
}

// spawnKids starts a child process for each of cfgs, the configurations
// of processes 1 and up, as spawn does: the binary bin(p) for process p,
// or this test binary when bin is nil.
func spawnKids[C any](ctx context.Context, t *testing.T, env string, cfgs []C, bin func(p int) string) *kids {
	t.Helper()
	k := &kids{}
	for i, cfg := range cfgs {
		b := os.Args[0]
		if bin != nil {
			b = bin(i + 1)
		}
		cmd, buf := spawn(ctx, t, b, env, cfg)
		k.cmds = append(k.cmds, cmd)
		k.outputs = append(k.outputs, buf)
	}
	return k
}

// collect waits for every child of k and returns first, this process's
// result, then the result of each child, read from the file out(p) of
// process p. A child that fails is left out and fails t, named by
// name(p).
func collect[R any](t *testing.T, k *kids, first R, out, name func(p int) string) []R {
	t.Helper()
	results := []R{first}
	for i, cmd := range k.cmds {
		var r R
		if err := result(cmd, out(i+1), &r); err != nil {
			t.Errorf("chaos: %s: %v\n%s", name(i+1), err, k.outputs[i])
			continue
		}
		results = append(results, r)
	}
	return results
}

// result waits for the child process cmd and reads its result (JSON) from
// the file at path into r.
func result(cmd *exec.Cmd, path string, r any) error {
	if err := cmd.Wait(); err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, r)
	}
	return err
}

// proxies returns, for each of procs processes, a proxy of its own to each
// lock node, so that a partition can separate one process from a node.
func proxies(t *testing.T, procs int, nodes []*rig.Node) [][]*rig.Proxy {
	t.Helper()
	views := make([][]*rig.Proxy, procs)
	for p := range views {
		for _, n := range nodes {
			px, err := rig.NewProxy(n.Addr())
			require.NoError(t, err)
			t.Cleanup(func() { px.Close() })
			views[p] = append(views[p], px)
		}
	}
	return views
}

// allReady waits until every contender process of the run has its Client,
// counted on the resource node, so that they start contending together:
// a child process takes a moment to start, and without the wait the first
// process can reach a small target alone (the negative control then has
// nobody to overlap with).
func allReady(ctx context.Context, res *redis.Client, cfg procConfig) error {
	key := "ready:" + strconv.FormatInt(cfg.Start.UnixNano(), 10)
	if err := res.Incr(ctx, key).Err(); err != nil {
		return fmt.Errorf("chaos: counting the ready processes: %w", err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		n, err := res.Get(ctx, key).Int()
		if err == nil && n >= cfg.Procs {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: %d of %d contender processes ready after a minute (%v)", n, cfg.Procs, err)
		}
	}
}

// joinRun opens a contender process's Client on nodes with opts and its
// client of the resource node, and waits until every process of the run
// that started at start has done so (allReady). The caller closes both;
// on failure, it returns neither.
func joinRun(ctx context.Context, nodes []string, opts *redlock.Options, resource string, procs int, start time.Time) (*redlock.Client, *redis.Client, error) {
	client, err := redlock.Open(nodes, opts)
	if err != nil {
		return nil, nil, err
	}
	res := redis.NewClient(redlock.NodeOptions(resource))
	if err := allReady(ctx, res, procConfig{Procs: procs, Start: start}); err != nil {
		client.Close()
		res.Close()
		return nil, nil, err
	}
	return client, res, nil
}

// contend runs one process's contenders until the run's target or deadline.
func contend(ctx context.Context, cfg procConfig) procResult {
	client, res, err := joinRun(ctx, cfg.Nodes, &cfg.Client, cfg.Resource, cfg.Procs, cfg.Start)
	if err != nil {
		return procResult{Err: err.Error()}
	}
	defer client.Close()
	defer res.Close()

	// writeMargin is how much validity a holder wants left before it
	// touches the resource: it covers the resource's round trip, so that a
	// write issued before Until lands before Until.
	writeMargin := cfg.TTL / 4
	var (
		acquired       atomic.Int64 // the run's total, as last read from the resource
		lockNS, holdNS atomic.Int64
		resErrs        atomic.Int64
		mu             sync.Mutex
		out            = procResult{MinStock: 1<<63 - 1}
		wg             sync.WaitGroup
	)
	deadline := cfg.Start.Add(cfg.MaxDuration)
	minEnd := cfg.Start.Add(cfg.MinDuration)
	stop := func() bool {
		now := time.Now()
		return ctx.Err() != nil || now.After(deadline) || (now.After(minEnd) && acquired.Load() >= int64(cfg.Target))
	}
	for w := range cfg.Workers {
		wg.Go(func() {
			var hist []locktest.Attempt
			minStock := int64(1<<63 - 1)
			// sell is the critical section of the oversell scenario. It
			// stops using the lock at Until.
			sell := func(key string, until time.Time) {
				if time.Until(until) < writeMargin {
					return
				}
				wctx, cancel := context.WithDeadline(ctx, until.Add(-writeMargin/2))
				defer cancel()
				s, err := res.Get(wctx, "stock:"+key).Int64()
				if err != nil {
					resErrs.Add(1)
					return
				}
				minStock = min(minStock, s)
				if s <= 0 {
					return
				}
				time.Sleep(rand.N(cfg.Hold + 1))
				if time.Until(until) < writeMargin {
					return
				}
				_, err = res.TxPipelined(wctx, func(p redis.Pipeliner) error {
					p.Set(wctx, "stock:"+key, s-1, 0)
					p.Incr(wctx, "sold:"+key)
					return nil
				})
				if err != nil {
					resErrs.Add(1)
				}
			}
			for !stop() {
				key := cfg.Keys[rand.IntN(len(cfg.Keys))]
				a := locktest.Attempt{Key: key, Client: cfg.Proc*1000 + w, Call: time.Now().UnixNano()}
				lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				l, err := client.Lock(lctx, key, cfg.TTL)
				cancel()
				a.Obtained = time.Now().UnixNano()
				lockNS.Add(a.Obtained - a.Call)
				if err != nil {
					hist = append(hist, a)
					continue
				}
				a.OK = true
				until := l.Until()
				sell(key, until)
				if rand.IntN(5) == 0 && l.Extend(ctx, cfg.TTL) == nil {
					until = l.Until()
					sell(key, until)
				}
				unlockStart := time.Now()
				_ = l.Unlock(ctx) // fails under faults; the keys then expire
				a.End = max(min(unlockStart.UnixNano(), until.UnixNano()), a.Obtained)
				hist = append(hist, a)
				holdNS.Add(time.Now().UnixNano() - a.Obtained)
				if n, err := res.Incr(ctx, "acquired").Result(); err == nil {
					acquired.Store(n)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			out.History = append(out.History, hist...)
			out.MinStock = min(out.MinStock, minStock)
		})
	}
	wg.Wait()
	out.Resource = int(resErrs.Load())
	out.LockWait, out.Held = time.Duration(lockNS.Load()), time.Duration(holdNS.Load())
	return out
}

// schedule returns the fault schedule of o; views are each process's
// proxies to the lock nodes, which a ClientPartition cuts.
func (o *Options) schedule(views [][]*rig.Proxy) locktest.Schedule {
	links := make([][]locktest.Link, len(views))
	for p, v := range views {
		for _, px := range v {
			links[p] = append(links[p], px)
		}
	}
	downtime := o.KillDowntime
	if downtime == 0 {
		downtime = -1 // the schedule's zero is its default; a negative value is zero
	}
	return locktest.Schedule{
		Seed: o.Seed, Kinds: o.Faults, MaxFaulty: o.MaxFaulty, Gap: o.FaultGap, Nodes: o.FaultNodes,
		KillDowntime: downtime, MaxLatency: o.Client.NodeTimeout * 3 / 4, FailoverLag: o.FailoverLag,
		Views: links,
	}
}

// targets returns the rig's nodes as the schedule's targets.
func targets(nodes []*rig.Node) []locktest.Target {
	out := make([]locktest.Target, len(nodes))
	for i, n := range nodes {
		out[i] = n
	}
	return out
}
