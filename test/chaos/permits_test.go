package chaos

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/locktest"
	"github.com/redquorum/redquorum/locktest/rig"
	"github.com/redquorum/redquorum/redlock"
)

// permitEnv carries a permit contender process's configuration (JSON) to
// the re-executed test binary; see TestMain.
const permitEnv = "REDQUORUM_CHAOS_PERMITS"

// PermitKind is what the contenders of a [RunPermits] hold.
type PermitKind string

// The kinds of hold.
const (
	// SemaphoreKind: a permit of redlock.Semaphore.
	SemaphoreKind PermitKind = "semaphore"
	// NaiveKind: a permit of naiveSemaphore, which counts holders on each
	// node and needs a majority (the negative control of SemaphoreKind).
	NaiveKind PermitKind = "naive-semaphore"
	// RWKind: redlock.RWMutex, a reader (RLock) three times in four, else
	// a writer (Lock).
	RWKind PermitKind = "rwmutex"
	// CarelessRWKind: RWKind's writers, and readers that take a slot of
	// another semaphore, one no writer takes (the negative control of
	// RWKind).
	CarelessRWKind PermitKind = "careless-rwmutex"
	// BlindWriterRWKind: RWKind's readers, and writers that lock the
	// writer key with the kernel alone, skipping the nodes' check for
	// reader slots (the negative control of that check).
	BlindWriterRWKind PermitKind = "blind-writer-rwmutex"
)

// PermitOptions configures [RunPermits]. The zero value of a field means
// its default.
type PermitOptions struct {
	Kind           PermitKind
	Nodes          int           // the first Nodes lock nodes of the rig (all five)
	Limit          int           // the semaphore's permits (3)
	Procs, Workers int           // contender processes, this one included (2), and contenders per process (4)
	TTL            time.Duration // of a hold (600ms)
	Hold           time.Duration // the longest hold before the release (20ms)
	Duration       time.Duration // of the contention (6s)
	// Faults are the kinds the schedule picks from, on a minority of the
	// lock nodes, as in Options (with its FaultGap and KillDowntime).
	Faults []FaultKind
	// PauseChildren stops a contender process other than this one
	// (SIGSTOP), while it holds, for one to three TTLs, half a second
	// apart on average: its holds run out of validity while it sleeps.
	PauseChildren bool
}

// PermitResult is what a [RunPermits] observed.
type PermitResult struct {
	History                []locktest.Attempt
	Acquisitions, Failures int
	Reads, Writes          int               // holds of the read-write kinds, by mode
	ByProc                 []int             // acquisitions per process
	Faults                 map[FaultKind]int // faults injected, by kind
	Pauses                 int               // SIGSTOPs of contender processes
	// HolderPauses counts the pauses that began while the paused process
	// had a hold inside its validity.
	HolderPauses int
	// MostAtOnce is the most holds inside their validity at one instant
	// (readers and writers alike).
	MostAtOnce int
	Report     *locktest.Report // CheckSemaphore's or Check's, by kind
	Timeline   string           // locktest's timeline of a run with violations
	Duration   time.Duration
}

// Excess is how many holders beyond the limit the worst crowd had.
func (r *PermitResult) Excess() int {
	most := 0
	for _, c := range r.Report.Crowds {
		most = max(most, c.Excess())
	}
	return most
}

// String is the summary line of the run.
func (r *PermitResult) String() string {
	return fmt.Sprintf("%d acquisitions (by process: %v; reads %d, writes %d), %d failed attempts in %v, at most %d holding at once, %d pauses (%d of a holder); faults: %s; violations: overlaps=%d crowds=%d (most holders beyond the limit: %d)",
		r.Acquisitions, r.ByProc, r.Reads, r.Writes, r.Failures, r.Duration.Round(time.Millisecond), r.MostAtOnce, r.Pauses, r.HolderPauses,
		faultSummary(r.Faults), len(r.Report.Overlaps), len(r.Report.Crowds), r.Excess())
}

// permitRig is the nodes that the runs of one test share: five lock nodes
// with replicas and one resource node, which only counts the processes
// that are ready.
type permitRig struct {
	lock []*rig.Node
	res  *rig.Node
}

// startPermitRig starts the rig of the runs of t.
func startPermitRig(t *testing.T) *permitRig {
	t.Helper()
	leakcheck.Check(t)
	c := rig.Start(t, 6, rig.WithReplicas())
	return &permitRig{lock: c.Nodes[:5], res: c.Nodes[5]}
}

// permitConfig is one contender process's part of a run.
type permitConfig struct {
	Proc, Procs    int
	Nodes          []string
	Resource       string
	Kind           PermitKind
	Name           string
	Limit, Workers int
	TTL, Hold      time.Duration
	Start          time.Time
	Duration       time.Duration
	Client         redlock.Options
	Out            string
}

// permitProcResult is what one permit contender process reports.
type permitProcResult struct {
	History []locktest.Attempt
	Err     string
}

// RunPermits runs the contenders of o on rg's nodes under o's faults and
// returns what it found; the caller asserts. It fails t only for failures
// of the harness itself.
func RunPermits(t *testing.T, rg *permitRig, o PermitOptions) *PermitResult {
	t.Helper()
	o.Limit = cmp.Or(o.Limit, 3)
	o.Procs = cmp.Or(o.Procs, 2)
	o.Workers = cmp.Or(o.Workers, 4)
	o.Hold = cmp.Or(o.Hold, 20*time.Millisecond)
	o.Duration = cmp.Or(o.Duration, 6*time.Second)
	fo := Options{Procs: o.Procs, TTL: o.TTL, Faults: o.Faults, Replicated: true}
	fo.defaults()
	lockNodes := rg.lock[:cmp.Or(o.Nodes, len(rg.lock))]
	views := proxies(t, o.Procs, lockNodes)
	var chaos *locktest.Chaos
	if len(o.Faults) > 0 {
		chaos = fo.schedule(views).Start(t, targets(lockNodes)...)
	}
	ctx := t.Context()
	start, dir := time.Now(), t.TempDir()
	name := "chaos:" + strings.ReplaceAll(t.Name(), "/", ":")
	cfgs := make([]permitConfig, o.Procs)
	for p := range cfgs {
		var addrs []string
		for _, px := range views[p] {
			addrs = append(addrs, px.Addr())
		}
		cfgs[p] = permitConfig{
			Proc: p, Procs: o.Procs, Nodes: addrs, Resource: rg.res.Addr(), Kind: o.Kind, Name: name,
			Limit: o.Limit, Workers: o.Workers, TTL: fo.TTL, Hold: o.Hold, Start: start, Duration: o.Duration,
			Client: fo.Client, Out: filepath.Join(dir, fmt.Sprintf("permits%d.json", p)),
		}
	}
	kids := spawnKids(ctx, t, permitEnv, cfgs[1:], nil)
	pctx, stopPauses := context.WithDeadline(ctx, start.Add(o.Duration)) // no child paused past its end
	var bg sync.WaitGroup
	var pauses []pause
	if o.PauseChildren {
		res := redis.NewClient(redlock.NodeOptions(rg.res.Addr()))
		defer res.Close()
		bg.Go(func() { pauses = pauseHolders(pctx, res, name, kids.cmds, fo.TTL) })
	}
	results := collect(t, kids, holdPermits(ctx, cfgs[0]), func(p int) string { return cfgs[p].Out },
		func(p int) string { return fmt.Sprintf("permit contender process %d", p) })
	stopPauses()
	bg.Wait()
	var faults []locktest.Fault // Schedule.Start fails t for the faults with an Err
	if chaos != nil {
		faults = chaos.Stop()
	}
	for _, v := range views {
		for _, px := range v {
			px.Heal()
		}
	}
	r := &PermitResult{Duration: time.Since(start), Pauses: len(pauses), Faults: locktest.Count(faults, o.Faults...)}
	for i, pr := range results {
		if pr.Err != "" {
			t.Errorf("chaos: permit contender process %d: %s", i, pr.Err)
		}
		r.History = append(r.History, pr.History...)
		r.ByProc = append(r.ByProc, 0)
		for _, a := range pr.History {
			if a.OK {
				r.ByProc[i]++
			}
		}
	}
	r.count()
	for _, pa := range pauses {
		if slices.ContainsFunc(r.History, func(a locktest.Attempt) bool {
			return a.OK && a.Client/1000 == pa.proc && a.Obtained <= pa.start && pa.start < a.End
		}) {
			r.HolderPauses++
		}
	}
	if o.Kind == SemaphoreKind || o.Kind == NaiveKind {
		r.Report = locktest.CheckSemaphore(r.History, faults, o.Limit)
	} else {
		r.Report = locktest.Check(r.History, faults)
	}
	if !r.Report.OK() {
		r.Timeline = filepath.Join(t.ArtifactDir(), "timeline.svg")
		require.NoError(t, r.Report.WriteTimeline(r.Timeline))
	}
	fmt.Printf("chaos: %s: %s\n", t.Name(), r)
	if r.Timeline != "" {
		fmt.Printf("chaos: %s: timeline of holds, faults and violations (kept with go test -artifacts): %s\n", t.Name(), r.Timeline)
	}
	return r
}

// count fills r's totals from its history.
func (r *PermitResult) count() {
	type edge struct {
		at    int64
		delta int
	}
	var edges []edge
	for _, a := range r.History {
		switch {
		case !a.OK:
			r.Failures++
			continue
		case a.Shared:
			r.Reads++
		default:
			r.Writes++
		}
		r.Acquisitions++
		edges = append(edges, edge{a.Obtained, 1}, edge{a.End, -1})
	}
	// An end sorts before an obtain at the same instant: the holds touch.
	slices.SortFunc(edges, func(a, b edge) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta)) })
	n := 0
	for _, e := range edges {
		n += e.delta
		r.MostAtOnce = max(r.MostAtOnce, n)
	}
}

// pause is one SIGSTOP of a contender process: which, and when it began.
type pause struct {
	proc  int
	start int64
}

// holdingKey is the key of the resource node that counts the holds of
// process proc on the semaphore or read-write lock name.
func holdingKey(name string, proc int) string { return "holding:" + name + ":" + strconv.Itoa(proc) }

// pauseHolders stops one of children (processes 1 and up) at random
// (SIGSTOP) for one to three ttls, half a second apart on average, until
// ctx is done, and returns the pauses it made; a pause ends with ctx. It
// stops the process only while it holds name (holdingKey on res), and
// gives up on it after a ttl. Every child runs again when it returns.
func pauseHolders(ctx context.Context, res *redis.Client, name string, children []*exec.Cmd, ttl time.Duration) []pause {
	var pauses []pause
	for len(children) > 0 {
		select {
		case <-ctx.Done():
			return pauses
		case <-time.After(rand.N(time.Second)):
		}
		i := rand.IntN(len(children))
		holding := false
		for deadline := time.Now().Add(ttl); !holding && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			n, err := res.Get(ctx, holdingKey(name, i+1)).Int()
			holding = err == nil && n > 0
		}
		p := children[i].Process
		if !holding || p.Signal(syscall.SIGSTOP) != nil {
			continue // no hold to cut short, or the process has ended
		}
		pauses = append(pauses, pause{proc: i + 1, start: time.Now().UnixNano()})
		select {
		case <-ctx.Done():
		case <-time.After(ttl + rand.N(2*ttl)):
		}
		_ = p.Signal(syscall.SIGCONT)
	}
	return pauses
}

// permitChild runs one permit contender process from its JSON
// configuration and writes its result to cfg.Out. It returns the process's
// exit code.
func permitChild(raw string) int {
	return runChild(raw, "chaos permit contender", holdPermits, func(c permitConfig) string { return c.Out })
}

// hold is one held permit or lock: a *redlock.Lock (a permit's, a
// reader's or a writer's) or a *naivePermit.
type hold interface {
	Until() time.Time
	Extend(ctx context.Context, ttl time.Duration) error
	Unlock(ctx context.Context) error
}

// acquirer returns how the contenders of cfg acquire, and what releases
// its resources: shared asks for a reader's hold, and only the read-write
// kinds look at it.
func acquirer(cfg permitConfig, client *redlock.Client) (acquire func(ctx context.Context, shared bool) (hold, error), close func()) {
	locked := func(l *redlock.Lock, err error) (hold, error) {
		if err != nil {
			return nil, err
		}
		return l, nil
	}
	permit := func(p *redlock.Permit, err error) (hold, error) {
		if err != nil {
			return nil, err
		}
		return p.Lock(), nil
	}
	sem := client.Semaphore(cfg.Name, cfg.Limit)
	rw := client.RWMutex(cfg.Name)
	switch cfg.Kind {
	case NaiveKind:
		naive := &naiveSemaphore{nodes: redlock.NewNodes(cfg.Nodes...), key: cfg.Name, limit: cfg.Limit, timeout: cfg.Client.NodeTimeout}
		return func(ctx context.Context, _ bool) (hold, error) {
			p, err := naive.Acquire(ctx, cfg.TTL)
			if err != nil {
				return nil, err
			}
			return p, nil
		}, naive.close
	case RWKind, CarelessRWKind:
		readers := client.Semaphore(cfg.Name+":careless-readers", redlock.RWMutexReaders)
		return func(ctx context.Context, shared bool) (hold, error) {
			switch {
			case !shared:
				return locked(rw.Lock(ctx, cfg.TTL))
			case cfg.Kind == CarelessRWKind:
				return permit(readers.Acquire(ctx, cfg.TTL))
			}
			return locked(rw.RLock(ctx, cfg.TTL))
		}, func() {}
	case BlindWriterRWKind:
		// The RWMutex's keys are KeyPrefix + "redquorum:rw:" + name + ":"
		// and a part: a Client whose prefix ends there locks its writer
		// key, "writer", as a plain key.
		opts := cfg.Client
		opts.KeyPrefix += "redquorum:rw:" + cfg.Name + ":"
		blind, err := redlock.Open(cfg.Nodes, &opts)
		if err != nil {
			return func(context.Context, bool) (hold, error) { return nil, err }, func() {}
		}
		return func(ctx context.Context, shared bool) (hold, error) {
			if shared {
				return locked(rw.RLock(ctx, cfg.TTL))
			}
			return locked(blind.Lock(ctx, "writer", cfg.TTL))
		}, func() { _ = blind.Close() }
	}
	return func(ctx context.Context, _ bool) (hold, error) { return permit(sem.Acquire(ctx, cfg.TTL)) }, func() {}
}

// holdPermits runs one process's contenders until the run's duration has
// passed.
func holdPermits(ctx context.Context, cfg permitConfig) permitProcResult {
	client, res, err := joinRun(ctx, cfg.Nodes, &cfg.Client, cfg.Resource, cfg.Procs, cfg.Start)
	if err != nil {
		return permitProcResult{Err: err.Error()}
	}
	defer client.Close()
	defer res.Close()
	acquire, closeAcquirer := acquirer(cfg, client)
	defer closeAcquirer()
	rw := cfg.Kind == RWKind || cfg.Kind == CarelessRWKind || cfg.Kind == BlindWriterRWKind
	end := cfg.Start.Add(cfg.Duration)
	var mu sync.Mutex
	var out permitProcResult
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		wg.Go(func() {
			var hist []locktest.Attempt
			for time.Now().Before(end) && ctx.Err() == nil {
				a := locktest.Attempt{Key: cfg.Name, Client: cfg.Proc*1000 + w, Call: time.Now().UnixNano(), Shared: rw && rand.IntN(4) != 0}
				actx, cancel := context.WithTimeout(ctx, 2*time.Second)
				h, err := acquire(actx, a.Shared)
				cancel()
				a.Obtained = time.Now().UnixNano()
				if err != nil {
					hist = append(hist, a)
					continue
				}
				a.OK = true
				res.Incr(ctx, holdingKey(cfg.Name, cfg.Proc))
				time.Sleep(rand.N(cfg.Hold + 1))
				if rand.IntN(5) == 0 {
					_ = h.Extend(ctx, cfg.TTL)
					time.Sleep(rand.N(cfg.Hold + 1))
				}
				until, release := h.Until(), time.Now()
				res.Decr(ctx, holdingKey(cfg.Name, cfg.Proc))
				_ = h.Unlock(ctx) // fails under faults; the keys then expire
				a.End = max(min(release.UnixNano(), until.UnixNano()), a.Obtained)
				hist = append(hist, a)
			}
			mu.Lock()
			defer mu.Unlock()
			out.History = append(out.History, hist...)
		})
	}
	wg.Wait()
	return out
}
