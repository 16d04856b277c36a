// Package loadtest runs the lock benchmarks of the redlock command and of the
// side-by-side comparison in bench/: the same scenarios through any lock
// implementation ([Locker]), measuring lock+unlock latency percentiles,
// throughput, hot-key contention (waits and each contender's share) and
// allocations, and reports them as a table, JSON or an SVG plot.
//
// It is a tool package: unlike the library's other internal packages it
// depends on redlock, whose [Redquorum] adapter it provides.
package loadtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
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
	Separate bool          // each caller has its own Locker, like separate processes
	Procs    bool          // each caller runs in an OS process of its own (see Runner.Spawn)
	Shared   int           // > 0: callers lock random keys of one pool of this many, holding Hold
	// HoldBlocking makes a holder block its thread in the kernel for Hold
	// (see holdFor) instead of sleeping on a Go timer: a critical section
	// of blocking work. A diagnostic: the standard scenarios sleep.
	HoldBlocking bool
}

// Scenarios returns the standard set: lock+unlock on distinct keys by one
// caller and by callers concurrent callers, one hot key with callers
// contenders holding it 1 ms (in one client, in a client each, and in a
// process each), callers
// separate clients locking random keys of a pool of sharedKeys and holding
// each 1 ms (occasional contention, as many service instances over many
// keys), and, when slow > 0, one caller with the first node slow by that
// much each way.
func Scenarios(d time.Duration, callers int, slow time.Duration) []Scenario {
	s := []Scenario{
		{ID: "distinct-1", Title: "lock+unlock, 1 caller", Callers: 1, Duration: d, TTL: 10 * time.Second},
		{ID: fmt.Sprintf("distinct-%d", callers), Title: fmt.Sprintf("lock+unlock, %d callers, distinct keys", callers), Callers: callers, Duration: d, TTL: 10 * time.Second},
		{ID: fmt.Sprintf("hotkey-%d", callers), Title: fmt.Sprintf("one hot key, %d contenders holding 1ms (wait)", callers), Callers: callers, HotKey: true, Hold: time.Millisecond, Duration: d, TTL: 10 * time.Second},
		{ID: fmt.Sprintf("hotkey-%d-clients", callers), Title: fmt.Sprintf("one hot key, %d separate clients holding 1ms (wait)", callers), Callers: callers, HotKey: true, Hold: time.Millisecond, Duration: d, TTL: 10 * time.Second, Separate: true},
		{ID: fmt.Sprintf("hotkey-%d-procs", callers), Title: fmt.Sprintf("one hot key, %d separate processes holding 1ms (wait)", callers), Callers: callers, HotKey: true, Hold: time.Millisecond, Duration: d, TTL: 10 * time.Second, Separate: true, Procs: true},
		{ID: fmt.Sprintf("shared-%d-clients", callers), Title: fmt.Sprintf("%d separate clients, %d shared keys, holding 1ms (wait)", callers, sharedKeys), Callers: callers, Shared: sharedKeys, Hold: time.Millisecond, Duration: d, TTL: 10 * time.Second, Separate: true},
	}
	if slow > 0 {
		s = append(s, Scenario{ID: "slow-1", Title: fmt.Sprintf("lock+unlock, 1 caller, one node +%v each way", slow), Callers: 1, Duration: d, TTL: 10 * time.Second, Slow: slow})
	}
	return s
}

// Dist is a latency distribution, in nanoseconds.
type Dist struct {
	Mean time.Duration `json:"mean_ns"`
	P50  time.Duration `json:"p50_ns"`
	P90  time.Duration `json:"p90_ns"`
	P99  time.Duration `json:"p99_ns"`
	P999 time.Duration `json:"p999_ns"`
	Max  time.Duration `json:"max_ns"`
}

// Result is one implementation's outcome in one scenario.
type Result struct {
	Impl     string  `json:"impl"`
	Scenario string  `json:"scenario"`
	Title    string  `json:"title"`
	Callers  int     `json:"callers"`
	Ops      int     `json:"ops"`
	Errors   int     `json:"errors"`
	Seconds  float64 `json:"seconds"`
	PerSec   float64 `json:"ops_per_sec"`
	// Latency is lock+unlock for distinct keys, the time spent in Lock for
	// a hot key.
	Latency     Dist    `json:"latency"`
	AllocsPerOp float64 `json:"allocs_per_op,omitempty"`
	BytesPerOp  float64 `json:"bytes_per_op,omitempty"`
	Shares      []int   `json:"shares,omitempty"` // hot key: acquisitions per contender
	FirstError  string  `json:"first_error,omitempty"`
	// Handoff is, for a hot key, the time from a holder's Unlock call to
	// the next holder's Lock returning; Overlaps counts holds that began
	// before the previous one's Unlock call (0 for a lock).
	Handoff  Dist `json:"handoff"`
	Overlaps int  `json:"overlaps"`
	// Hold is, for a hot key, the time from Lock returning to the Unlock
	// call: the scenario's hold as the holder's process kept it. With the
	// mean handoff it makes the cycle that the rate is the inverse of.
	Hold Dist `json:"hold"`
	// NodeCPU is the CPU time of the nodes' processes per operation, when
	// the Runner knows them (Runner.NodePIDs); nil otherwise.
	NodeCPU *NodeCPU `json:"node_cpu,omitempty"`

	samples  []time.Duration // sorted
	handoffs []time.Duration // sorted
	holds    []time.Duration // sorted
}

// ShareRatio returns the smallest contender's share divided by the largest's
// (1 is perfectly fair), or 0 when there are no shares.
func (r *Result) ShareRatio() float64 {
	if len(r.Shares) == 0 || slices.Max(r.Shares) == 0 {
		return 0
	}
	return float64(slices.Min(r.Shares)) / float64(slices.Max(r.Shares))
}

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
}

// Run measures impl in sc on the nodes at addrs. It returns an error only
// when the implementation or the slow-node proxy cannot be set up, or the
// CPU time of r.NodePIDs cannot be read; lock failures are counted in the
// Result.
func (r *Runner) Run(ctx context.Context, impl Impl, sc Scenario, addrs []string) (Result, error) {
	addrs = slices.Clone(addrs)
	if sc.Slow > 0 {
		p, via, err := ProxyNode(addrs[0])
		if err != nil {
			return Result{}, err
		}
		defer p.Close()
		p.SetLatency(sc.Slow, sc.Slow)
		addrs[0] = via
	}
	prefix := "bench:" + impl.Name + ":" + sc.ID + ":" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":"
	if sc.Procs {
		res, err := r.runProcs(ctx, impl, sc, addrs, prefix)
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
	ticks0, err := nodeTicks(r.NodePIDs)
	if err != nil {
		return Result{}, err
	}
	stop := r.progress(impl.Name, sc)
	res := run(ctx, lockers, sc, prefix, sc.Duration)
	stop()
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

// progress prints a line per second until the returned function is called.
func (r *Runner) progress(name string, sc Scenario) (stop func()) {
	if r.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		start := time.Now()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			fmt.Fprintf(r.Progress, "\r  %-10s %-55s %3.0f/%.0fs", name, sc.Title, time.Since(start).Seconds(), sc.Duration.Seconds())
			select {
			case <-done:
				fmt.Fprintf(r.Progress, "\r  %-10s %-55s done\n", name, sc.Title)
				return
			case <-t.C:
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

// sharedKeys is the pool of keys of the shared-keys scenario.
const sharedKeys = 64

// keyRing is the number of distinct keys each caller cycles through.
const keyRing = 512

// run drives the callers for d, caller w through lockers[w], and gathers
// their samples.
func run(ctx context.Context, lockers []Locker, sc Scenario, prefix string, d time.Duration) Result {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	deadline := start.Add(d)
	callers := make([]caller, sc.Callers)
	var wg sync.WaitGroup
	for w := range callers {
		wg.Go(func() { callers[w] = callerLoop(ctx, lockers[w], sc, callerKeys(sc, prefix, w), deadline) })
	}
	wg.Wait()
	return gather(callers, sc, time.Since(start))
}

// callerKeys returns the keys caller w locks, in turn or at random.
func callerKeys(sc Scenario, prefix string, w int) []string {
	n := keyRing
	if sc.HotKey {
		n = 1
	}
	if sc.Shared > 0 {
		n = sc.Shared
	}
	keys := make([]string, n)
	for i := range n {
		keys[i] = prefix + strconv.Itoa(w) + ":" + strconv.Itoa(i)
		if sc.Shared > 0 {
			keys[i] = prefix + "shared:" + strconv.Itoa(i)
		}
		if sc.HotKey {
			keys[i] = prefix + "hot"
		}
	}
	return keys
}

// caller is what one caller measured.
type caller struct {
	Samples []time.Duration `json:"samples_ns"`
	Holds   []Hold          `json:"holds,omitempty"` // hot key only
	Errors  int             `json:"errors"`
	First   string          `json:"first_error,omitempty"`
}

// Hold is one hold of a hot key, in wall-clock Unix nanoseconds (which
// separate processes on one machine share): when Lock returned it, and when
// Unlock was called.
type Hold struct {
	Obtained int64 `json:"obtained"`
	Released int64 `json:"released"`
}

// callerLoop locks keys through l until deadline.
func callerLoop(ctx context.Context, l Locker, sc Scenario, keys []string, deadline time.Time) caller {
	c := caller{Samples: make([]time.Duration, 0, 4096)}
	var first error
	for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		t0 := time.Now()
		lctx, lcancel := context.WithDeadline(ctx, deadline.Add(10*time.Second))
		k := keys[i%len(keys)]
		if sc.Shared > 0 {
			k = keys[rand.IntN(len(keys))]
		}
		held, err := l.Lock(lctx, k, sc.TTL)
		lcancel()
		var h Hold
		if err == nil && (sc.HotKey || sc.Shared > 0) {
			h.Obtained = time.Now().UnixNano()
			c.Samples = append(c.Samples, time.Since(t0))
			holdFor(sc)
		}
		if err == nil {
			h.Released = time.Now().UnixNano()
			err = held.Unlock(ctx)
			if err == nil && !sc.HotKey && sc.Shared == 0 {
				c.Samples = append(c.Samples, time.Since(t0))
			}
			if sc.HotKey && h.Obtained < deadline.UnixNano() {
				// Only holds that began in the measured time: after it,
				// the holders stop locking, and the waiters left (redsync's
				// in their backoff) come in one by one.
				c.Holds = append(c.Holds, h)
			}
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			c.Errors++
			if first == nil {
				first = err
				c.First = err.Error()
			}
		}
	}
	return c
}

// gather pools what the callers measured over elapsed.
func gather(callers []caller, sc Scenario, elapsed time.Duration) Result {
	res := Result{Seconds: elapsed.Seconds()}
	var holds []Hold
	for _, c := range callers {
		res.samples = append(res.samples, c.Samples...)
		res.Errors += c.Errors
		if c.First != "" && res.FirstError == "" {
			res.FirstError = c.First
		}
		if sc.HotKey {
			res.Shares = append(res.Shares, len(c.Samples))
			holds = append(holds, c.Holds...)
		}
	}
	slices.Sort(res.samples)
	res.Ops = len(res.samples)
	res.PerSec = float64(res.Ops) / elapsed.Seconds()
	res.Latency = dist(res.samples)
	res.handoffs, res.Overlaps = handoffs(holds)
	res.Handoff = dist(res.handoffs)
	for _, h := range holds {
		res.holds = append(res.holds, time.Duration(h.Released-h.Obtained))
	}
	slices.Sort(res.holds)
	res.Hold = dist(res.holds)
	return res
}

// handoffs returns, for holds of one key sorted by when they were obtained,
// the time from each Unlock call to the next hold's start (sorted), and how
// many holds began before an earlier one was released.
func handoffs(holds []Hold) (gaps []time.Duration, overlaps int) {
	slices.SortFunc(holds, func(a, b Hold) int { return cmp.Compare(a.Obtained, b.Obtained) })
	var last int64
	for i, h := range holds {
		if i > 0 {
			if h.Obtained < last {
				overlaps++
			} else {
				gaps = append(gaps, time.Duration(h.Obtained-holds[i-1].Released))
			}
		}
		last = max(last, h.Released)
	}
	slices.Sort(gaps)
	return gaps, overlaps
}

// dist returns the percentiles of sorted samples.
func dist(s []time.Duration) Dist {
	if len(s) == 0 {
		return Dist{}
	}
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return Dist{Mean: sum / time.Duration(len(s)), P50: quantile(s, 0.5), P90: quantile(s, 0.9), P99: quantile(s, 0.99), P999: quantile(s, 0.999), Max: s[len(s)-1]}
}

// quantile returns the q-quantile of sorted samples (nearest rank).
func quantile(s []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(s))+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Merge pools the results of several runs of one implementation in one
// scenario (for example short runs alternated with another implementation's,
// so that both see the same drift in machine load) into one Result: samples,
// operations, errors, time and shares add up; allocations are averaged over
// all operations.
func Merge(rs []Result) Result {
	if len(rs) == 0 {
		return Result{}
	}
	m := rs[0]
	m.samples, m.handoffs, m.holds = nil, nil, nil
	m.Shares = nil
	m.Ops, m.Errors, m.Seconds, m.Overlaps = 0, 0, 0, 0
	var allocs, bytes float64
	var ticks int64
	for _, r := range rs {
		if r.NodeCPU != nil {
			ticks += r.NodeCPU.Ticks
		}
		m.samples = append(m.samples, r.samples...)
		m.handoffs = append(m.handoffs, r.handoffs...)
		m.holds = append(m.holds, r.holds...)
		m.Overlaps += r.Overlaps
		m.Ops += r.Ops
		m.Errors += r.Errors
		m.Seconds += r.Seconds
		allocs += r.AllocsPerOp * float64(r.Ops)
		bytes += r.BytesPerOp * float64(r.Ops)
		if m.FirstError == "" {
			m.FirstError = r.FirstError
		}
		if len(r.Shares) > 0 {
			if m.Shares == nil {
				m.Shares = make([]int, len(r.Shares))
			}
			for i, s := range r.Shares {
				m.Shares[i] += s
			}
		}
	}
	slices.Sort(m.samples)
	slices.Sort(m.handoffs)
	m.Handoff = dist(m.handoffs)
	slices.Sort(m.holds)
	m.Hold = dist(m.holds)
	if m.Ops > 0 {
		m.AllocsPerOp, m.BytesPerOp = allocs/float64(m.Ops), bytes/float64(m.Ops)
	}
	if m.Seconds > 0 {
		m.PerSec = float64(m.Ops) / m.Seconds
	}
	m.Latency = dist(m.samples)
	if m.NodeCPU != nil {
		m.NodeCPU = newNodeCPU(ticks, m.Ops)
	}
	return m
}
