// Package loadtest runs the lock benchmarks of the redlock command and of the
// side-by-side comparison in bench/. It runs the same scenarios through any
// lock implementation ([Locker]). It measures lock+unlock latency
// percentiles, throughput, hot-key contention (waits and each contender's
// share) and allocations. It reports them as a table, JSON or an SVG plot.
//
// It measures speed and fairness, where its parent package locktest checks
// safety under faults. It depends on redlock, whose [Redquorum] adapter it
// provides. Its API serves the redlock command and bench/ first, and may
// change between releases.
package loadtest

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Locker is a lock implementation under test. Lock blocks until it holds
// key for ttl or ctx ends.
type Locker interface {
	Lock(ctx context.Context, key string, ttl time.Duration) (Unlocker, error)
}

// Unlocker releases one held lock.
type Unlocker interface {
	Unlock(ctx context.Context) error
}

// Impl is a named way to build a Locker on a list of node addresses. close
// releases what New built (connection pools, clients).
type Impl struct {
	Name string
	New  func(addrs []string) (l Locker, close func(), err error)
}

// Scenario is one measurement.
type Scenario struct {
	ID       string        // short name, for JSON and file names
	Title    string        // what a reader sees
	Callers  int           // concurrent goroutines
	HotKey   bool          // all callers lock one key and hold it for Hold
	Hold     time.Duration // time a hot-key holder keeps the lock
	Duration time.Duration // measured run time, after a warm-up
	TTL      time.Duration
	Slow     time.Duration // latency added each way in front of the first node
	// Down cuts the first node off half-way through the measured phase, as
	// a crashed server: it reaches the node through a proxy that then
	// resets its connections and refuses new ones.
	Down     bool
	Separate bool // each caller has its own Locker, like separate processes
	Procs    bool // each caller runs in an OS process of its own (see Runner.Spawn)
	Shared   int  // > 0: callers lock random keys of one pool of this many, holding Hold
	// HoldBlocking makes a holder block its thread in the kernel for Hold
	// (see holdFor) instead of sleeping on a Go timer: a critical section
	// of blocking work. A diagnostic: the standard scenarios sleep.
	HoldBlocking bool
}

// Scenarios returns the standard set, each measured for d. Lock+unlock runs
// on distinct keys, by one caller and by callers concurrent callers. On one
// hot key, callers contenders hold it 1 ms each time: in one client, in a
// client each, and in a process each; and in a client each while the first
// node is cut off half-way. In the shared-keys scenario, callers
// separate clients lock random keys of a pool of sharedKeys, holding each
// 1 ms. That is occasional contention, as many service instances over many
// keys. When slow > 0, one caller runs with the first node slow by that much
// each way.
func Scenarios(d time.Duration, callers int, slow time.Duration) []Scenario {
	s := []Scenario{
		{ID: "distinct-1", Title: "lock+unlock, 1 caller", Callers: 1, Duration: d, TTL: 10 * time.Second},
		{ID: fmt.Sprintf("distinct-%d", callers), Title: fmt.Sprintf("lock+unlock, %d callers, distinct keys", callers), Callers: callers, Duration: d, TTL: 10 * time.Second},
		{ID: fmt.Sprintf("hotkey-%d", callers), Title: fmt.Sprintf("one hot key, %d contenders holding 1ms (wait)", callers), Callers: callers, HotKey: true, Hold: time.Millisecond, Duration: d, TTL: 10 * time.Second},
		{ID: fmt.Sprintf("hotkey-%d-clients", callers), Title: fmt.Sprintf("one hot key, %d separate clients holding 1ms (wait)", callers), Callers: callers, HotKey: true, Hold: time.Millisecond, Duration: d, TTL: 10 * time.Second, Separate: true},
		{ID: fmt.Sprintf("hotkey-%d-procs", callers), Title: fmt.Sprintf("one hot key, %d separate processes holding 1ms (wait)", callers), Callers: callers, HotKey: true, Hold: time.Millisecond, Duration: d, TTL: 10 * time.Second, Separate: true, Procs: true},
		{ID: fmt.Sprintf("hotkey-%d-clients-down", callers), Title: fmt.Sprintf("one hot key, %d separate clients, a node cut off half-way (wait)", callers), Callers: callers, HotKey: true, Hold: time.Millisecond, Duration: d, TTL: 10 * time.Second, Separate: true, Down: true},
		{ID: fmt.Sprintf("shared-%d-clients", callers), Title: fmt.Sprintf("%d separate clients, %d shared keys, holding 1ms (wait)", callers, sharedKeys), Callers: callers, Shared: sharedKeys, Hold: time.Millisecond, Duration: d, TTL: 10 * time.Second, Separate: true},
	}
	if slow > 0 {
		s = append(s, Scenario{ID: "slow-1", Title: fmt.Sprintf("lock+unlock, 1 caller, one node +%v each way", slow), Callers: 1, Duration: d, TTL: 10 * time.Second, Slow: slow})
	}
	return s
}

// sharedKeys is the pool of keys of the shared-keys scenario.
const sharedKeys = 64

// Runner runs scenarios. Its zero value runs silently without measuring
// allocations.
type Runner struct {
	// Progress, when not nil, receives a line per second of each run.
	Progress io.Writer
	// MeasureAllocs counts the process's allocations during the measured
	// phase, per operation. Leave it off when the nodes run in-process.
	MeasureAllocs bool
	// Warmup is run before measuring; zero means a tenth of the duration.
	Warmup time.Duration
	// Spawn returns the command of a worker process, for the scenarios whose
	// callers run in processes of their own: the program itself, which
	// then finds its [WorkerSpec] with [WorkerFromEnv] and runs it with
	// [RunWorker]. Run sets the command's environment and output.
	Spawn func(ctx context.Context) *exec.Cmd
	// Settings go to every worker process in its WorkerSpec.
	Settings map[string]string
	// NodePIDs are the nodes' server processes, on this machine. When set,
	// Run reads their CPU time (/proc/PID/stat) before and after the
	// measured phase and reports it per operation (Result.NodeCPU). The
	// slow-node proxy runs in this process, not in theirs.
	NodePIDs []int
	// CountCommands counts the commands the nodes run during the measured
	// phase, by name (Result.Commands): it resets their statistics at the
	// phase's start (CONFIG RESETSTAT), so other users of the nodes see
	// them cleared.
	CountCommands bool
}

// Run measures impl in sc on the nodes at addrs. Lock failures are counted
// in the Result. Run returns an error only when the implementation or the
// slow-node proxy cannot be set up, or when the CPU time of r.NodePIDs
// cannot be read.
func (r *Runner) Run(ctx context.Context, impl Impl, sc Scenario, addrs []string) (Result, error) {
	nodes := addrs
	addrs = slices.Clone(addrs)
	var cut func() // cuts the first node off (Down)
	if sc.Slow > 0 || sc.Down {
		p, via, err := ProxyNode(addrs[0])
		if err != nil {
			return Result{}, err
		}
		defer p.Close()
		p.SetLatency(sc.Slow, sc.Slow)
		addrs[0] = via
		if sc.Down {
			cut = func() { p.SetTarget(""); p.Cut() }
		}
	}
	prefix := "bench:" + impl.Name + ":" + sc.ID + ":" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	if sc.Procs {
		res, err := r.runProcs(ctx, impl, sc, addrs, nodes, prefix)
		res.Impl, res.Scenario, res.Title, res.Callers = impl.Name, sc.ID, sc.Title, sc.Callers
		return res, err
	}
	lockers := make([]Locker, 1, sc.Callers)
	n := 1
	if sc.Separate {
		n = sc.Callers
	}
	for i := range n {
		l, closeFn, err := impl.New(addrs)
		if err != nil {
			return Result{}, fmt.Errorf("%s: %w", impl.Name, err)
		}
		defer closeFn()
		if i == 0 {
			lockers[0] = l
		} else {
			lockers = append(lockers, l)
		}
	}
	for len(lockers) < sc.Callers {
		lockers = append(lockers, lockers[0]) // one Locker shared by the callers
	}
	warm := r.Warmup
	if warm == 0 {
		warm = sc.Duration / 10
	}
	run(ctx, lockers, sc, prefix+"warm:", warm)

	var ms0, ms1 runtime.MemStats
	if r.MeasureAllocs {
		runtime.GC()
		runtime.ReadMemStats(&ms0)
	}
	if r.CountCommands {
		if err := resetCommands(ctx, nodes); err != nil {
			return Result{}, err
		}
	}
	ticks0, err := nodeTicks(r.NodePIDs)
	if err != nil {
		return Result{}, err
	}
	self := []int{os.Getpid()}
	client0, err := nodeTicks(self)
	if err != nil {
		return Result{}, err
	}
	stop := r.progress(impl.Name, sc)
	if cut != nil {
		t := time.AfterFunc(sc.Duration/2, cut)
		defer t.Stop()
	}
	res := run(ctx, lockers, sc, prefix, sc.Duration)
	stop()
	if r.CountCommands {
		calls, usec, err := readCommands(ctx, nodes)
		if err != nil {
			return Result{}, err
		}
		res.Commands = newCommands(calls, usec, res.Ops)
	}
	client1, err := nodeTicks(self)
	if err != nil {
		return Result{}, err
	}
	res.ClientCPU = newNodeCPU(client1-client0, res.Ops)
	ticks1, err := nodeTicks(r.NodePIDs)
	if err != nil {
		return Result{}, err
	}
	if r.NodePIDs != nil {
		res.NodeCPU = newNodeCPU(ticks1-ticks0, res.Ops)
	}
	if r.MeasureAllocs {
		runtime.ReadMemStats(&ms1)
		if res.Ops > 0 {
			res.AllocsPerOp = float64(ms1.Mallocs-ms0.Mallocs) / float64(res.Ops)
			res.BytesPerOp = float64(ms1.TotalAlloc-ms0.TotalAlloc) / float64(res.Ops)
		}
	}
	res.Impl, res.Scenario, res.Title, res.Callers = impl.Name, sc.ID, sc.Title, sc.Callers
	return res, nil
}

// progress reports a run on r.Progress until the returned function is
// called. On a terminal it rewrites a line each second. Elsewhere, such as
// a log or a CI job's output, it writes one line when the function is called.
func (r *Runner) progress(name string, sc Scenario) (stop func()) {
	if r.Progress == nil {
		return func() {}
	}
	start := time.Now()
	if !terminal(r.Progress) {
		return func() {
			fmt.Fprintf(r.Progress, "  %-22s %-55s done in %.1fs\n", name, sc.Title, time.Since(start).Seconds())
		}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			fmt.Fprintf(r.Progress, "\r  %-22s %-55s %3.0f/%.0fs", name, sc.Title, time.Since(start).Seconds(), sc.Duration.Seconds())
			select {
			case <-done:
				fmt.Fprintf(r.Progress, "\r  %-22s %-55s done\n", name, sc.Title)
				return
			case <-t.C:
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// terminal reports whether w is a terminal, where a carriage return
// rewrites the line.
func terminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
