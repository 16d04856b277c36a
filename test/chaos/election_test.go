package chaos

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/locktest"
	"github.com/redquorum/redquorum/locktest/rig"
	"github.com/redquorum/redquorum/redlock"
)

// TestChaosElection is the election phase: three OS processes of two
// candidates each campaign in one election while every kind of fault hits
// two of the five lock nodes (see RunElection), and the leader's process, when it is not
// this one, is paused now and then (SIGSTOP) for one to three TTLs, long
// enough for its leadership to run out meanwhile. A leader acts (writes its term to
// a store that refuses a lower term than it has seen) only while its Done is
// open and its validity has more than a margin left. At no instant may two
// leaders be inside their validity, terms must increase from leader to
// leader, and no write may be decided outside its leader's tenure.
func TestChaosElection(t *testing.T) {
	r := RunElection(t, ElectionOptions{Faults: AllFaults})
	assert.GreaterOrEqual(t, r.Tenures, 30, "leaderships under faults")
	assert.Positive(t, r.Pauses, "leaders' processes paused")
	assert.GreaterOrEqual(t, r.Lost, 2, "leaderships that their leader found lost, after a pause")
	for p, n := range r.ByProc {
		assert.Positive(t, n, "leaderships of process %d", p)
	}
	assert.Empty(t, r.Overlaps, "two leaders inside their validity at once")
	assert.Zero(t, r.TermInversions, "terms that did not increase from leader to leader")
	assert.Zero(t, r.Outside, "writes decided outside the writer's tenure")
	assert.Zero(t, r.StaleAccepted, "stale writes the store accepted")
	assert.Positive(t, r.Observed, "leaders that Observe reported")
	assert.Zero(t, r.ObservedInversions, "leaders that Observe reported with a lower term than the one before")
	assert.Positive(t, r.Writes, "writes")
	assert.Empty(t, r.Leftover, "lock keys left after their TTL")
}

// TestChaosElectionNegativeControl runs the election phase with careless
// candidates, which act without looking at Done or their validity. A
// paused leader then writes on waking after its term has ended: the check
// must count writes decided outside the writer's tenure, and the store must
// refuse some of them, or have taken them while another leader led. The
// tenures themselves still never overlap: leadership is as safe as before,
// only the leaders' discipline is gone.
func TestChaosElectionNegativeControl(t *testing.T) {
	r := RunElection(t, ElectionOptions{Careless: true})
	assert.Positive(t, r.Pauses, "leaders' processes paused")
	assert.Positive(t, r.Outside, "writes decided outside the writer's tenure")
	assert.Positive(t, r.Refused+r.StaleAccepted, "stale writes refused by the store or taken during another's tenure")
	assert.Empty(t, r.Overlaps, "the tenures themselves")
	assert.Zero(t, r.TermInversions)
}

// candidateEnv carries a candidate process's configuration (JSON) to the
// re-executed test binary; see TestMain.
const candidateEnv = "REDQUORUM_CHAOS_CANDIDATE"

// ElectionOptions configures [RunElection]. The zero value of a field
// means its default.
type ElectionOptions struct {
	Procs, Candidates int           // candidate processes, this one included (3), and candidates per process (2)
	TTL               time.Duration // the leadership's TTL (600ms)
	// The campaigning lasts MinDuration (20s) and until Target leaderships
	// (30), of which MinLost found lost by their leader (2), have ended,
	// or MaxDuration (90s).
	MinDuration, MaxDuration time.Duration
	Target, MinLost          int
	Faults                   []FaultKind // as in Options, on a minority of the 5 lock nodes
	// Careless candidates act without checking Done or their validity
	// (the negative control).
	Careless bool
	Seed     uint64 // the fault schedule's seed (Options.Seed); 0 draws one
}

// candidateConfig is one candidate process's part of a run.
type candidateConfig struct {
	Proc, Procs         int
	Nodes               []string
	Store               string // the fencing store's address
	Candidates          int
	TTL                 time.Duration
	Start               time.Time
	MinDuration         time.Duration
	MaxDuration         time.Duration
	Target, MinLost     int
	Careless            bool
	Client              redlock.Options
	Out                 string
	ElectionName, Fence string
}

// candidateResult is what one candidate process reports.
type candidateResult struct {
	Tenures []Tenure
	Failed  map[string]int // Campaign's errors, by message
	Err     string
}

// RunElection runs the election phase of o on a fresh rig and returns what
// it found; the caller asserts. It fails t only for failures of the
// harness itself.
func RunElection(t *testing.T, o ElectionOptions) *ElectionResult {
	t.Helper()
	o.Procs = cmp.Or(o.Procs, 3)
	o.Candidates = cmp.Or(o.Candidates, 2)
	o.TTL = cmp.Or(o.TTL, 600*time.Millisecond)
	o.MinDuration = cmp.Or(o.MinDuration, 20*time.Second)
	o.MaxDuration = cmp.Or(o.MaxDuration, 90*time.Second)
	o.Target = cmp.Or(o.Target, 30)
	o.MinLost = cmp.Or(o.MinLost, 2)
	// The faults hit two of the five lock nodes. A leader's term is a fence,
	// and a fenced lock needs a quorum of nodes that kept their fence
	// counters: kills spread over three nodes, before a lock writes the
	// counters back, leave every fenced lock refused until an operator runs
	// "redlock guard fence" (docs/SAFETY.md), which is availability, not
	// what this phase checks.
	fo := Options{Faults: o.Faults, Procs: o.Procs, TTL: o.TTL, FaultNodes: []int{0, 1}, Seed: o.Seed}
	fo.defaults() // the candidates' Clients are default ones: an election's lock is fenced on any Client
	leakcheck.Check(t)
	c := rig.Start(t, fo.Nodes+1)
	lockNodes, store := c.Nodes[:fo.Nodes], c.Nodes[fo.Nodes]
	views := proxies(t, o.Procs, lockNodes)
	ctx := t.Context()
	establish(t, lockNodes, fo.Client)
	var chaos *locktest.Chaos
	if len(o.Faults) > 0 {
		chaos = fo.schedule(views).Start(t, targets(lockNodes)...)
	}
	bgCtx, stopBg := context.WithCancel(ctx)
	var bg sync.WaitGroup

	start, dir := time.Now(), t.TempDir()
	cfgs := make([]candidateConfig, o.Procs)
	for p := range cfgs {
		var addrs []string
		for _, px := range views[p] {
			addrs = append(addrs, px.Addr())
		}
		opts := fo.Client
		opts.Owner = procOwner(p) // tells the pauses which process leads
		cfgs[p] = candidateConfig{
			Proc: p, Procs: o.Procs, Nodes: addrs, Store: store.Addr(), Candidates: o.Candidates,
			TTL: o.TTL, Start: start, MinDuration: o.MinDuration, MaxDuration: o.MaxDuration,
			Target: o.Target, MinLost: o.MinLost, Careless: o.Careless, Client: opts,
			Out: filepath.Join(dir, fmt.Sprintf("candidates%d.json", p)), ElectionName: "chaos:election", Fence: "fence:chaos:election",
		}
	}
	kids := spawnKids(ctx, t, candidateEnv, cfgs[1:], nil)
	pauses := 0
	bg.Go(func() { pauses = pauseLeaders(bgCtx, cfgs[0], kids.cmds) })
	var observed []redlock.LeaderInfo
	bg.Go(func() { observed = observe(bgCtx, cfgs[0]) })
	results := collect(t, kids, campaign(ctx, cfgs[0]), func(p int) string { return cfgs[p].Out },
		func(p int) string { return fmt.Sprintf("candidate process %d", p) })
	stopBg()
	bg.Wait()
	var faults []locktest.Fault // Schedule.Start fails t for the faults with an Err
	if chaos != nil {
		faults = chaos.Stop()
	}
	calm := time.Now()

	var tenures []Tenure
	r := &ElectionResult{Pauses: pauses, Faults: locktest.Count(faults, o.Faults...), Failed: map[string]int{}}
	for i, cr := range results {
		if cr.Err != "" {
			t.Errorf("chaos: candidate process %d: %s", i, cr.Err)
		}
		for msg, n := range cr.Failed {
			r.Failed[msg] += n
		}
		tenures = append(tenures, cr.Tenures...)
		r.ByProc = append(r.ByProc, len(cr.Tenures))
	}
	if report := checkElection(r, tenures, faults); !report.OK() {
		r.Timeline = filepath.Join(t.ArtifactDir(), "timeline.svg")
		if err := report.WriteTimeline(r.Timeline); err != nil {
			t.Errorf("chaos: timeline: %v", err)
		}
	}
	var prev uint64
	for _, info := range observed {
		if info.Term == 0 {
			continue
		}
		r.Observed++
		if info.Term < prev {
			r.ObservedInversions++
		}
		prev = info.Term
	}
	time.Sleep(time.Until(calm.Add(o.TTL + 250*time.Millisecond)))
	for _, n := range lockNodes {
		r.Leftover = append(r.Leftover, lockKeys(t, n.Name(), n.Addr())...)
	}
	fmt.Printf("chaos: %s: %s\n", t.Name(), r)
	if r.Timeline != "" {
		fmt.Printf("chaos: %s: timeline of tenures, faults and overlaps (kept with go test -artifacts): %s\n", t.Name(), r.Timeline)
	}
	return r
}

// establish puts the fresh deployment of nodes in service before any
// fault, as a deployment is in production: one fenced lock, taken and
// released while every node answers, so that every node's fence counter is
// known. Without it, a first round that misses a node (a fault from the
// schedule's first instant) leaves the others guarded, and once their
// guards run out their counters are unknown: fenced locks are then refused
// until an operator runs "redlock guard fence" (docs/OPERATING.md), which
// the election phase does not check.
func establish(t *testing.T, nodes []*rig.Node, opts redlock.Options) {
	t.Helper()
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.Addr()
	}
	opts.Fencing = true
	client, err := redlock.Open(addrs, &opts)
	require.NoError(t, err)
	defer client.Close()
	l, err := client.TryLock(t.Context(), "chaos:establish", time.Second)
	require.NoError(t, err, "the deployment's first lock, before any fault")
	require.NoError(t, l.Unlock(t.Context()))
}

// procOwner is the Options.Owner of the candidates of process p.
func procOwner(p int) string { return "proc" + strconv.Itoa(p) }

// pauseLeaders stops the leading candidate's process (SIGSTOP) for one to
// three TTLs, about every second, when it is one of children (processes 1
// and up), until ctx is done, and returns how many pauses it made. Every
// process runs again when it returns.
func pauseLeaders(ctx context.Context, cfg candidateConfig, children []*exec.Cmd) int {
	client, err := redlock.Open(cfg.Nodes, &cfg.Client)
	if err != nil {
		return 0
	}
	defer client.Close()
	e := client.Election(cfg.ElectionName)
	n := 0
	for {
		select {
		case <-ctx.Done():
			return n
		case <-time.After(rand.N(2 * time.Second)):
		}
		var p *os.Process
		for p == nil && ctx.Err() == nil {
			info, err := e.Leader(ctx)
			for i, cmd := range children {
				if err == nil && info.Owner == procOwner(i+1) {
					p = cmd.Process
				}
			}
			if p == nil {
				time.Sleep(cfg.TTL / 10)
			}
		}
		if p == nil || p.Signal(syscall.SIGSTOP) != nil {
			continue // ctx is done, or the process has ended
		}
		n++
		select {
		case <-ctx.Done():
		case <-time.After(cfg.TTL + rand.N(2*cfg.TTL)):
		}
		_ = p.Signal(syscall.SIGCONT)
	}
}

// observe collects what Observe reports of the run's election until ctx
// is done.
func observe(ctx context.Context, cfg candidateConfig) []redlock.LeaderInfo {
	client, err := redlock.Open(cfg.Nodes, &cfg.Client)
	if err != nil {
		return nil
	}
	defer client.Close()
	var seen []redlock.LeaderInfo
	for info := range client.Election(cfg.ElectionName).Observe(ctx) {
		seen = append(seen, info)
	}
	return seen
}

// candidateChild runs one candidate process from its JSON configuration
// and writes its result to cfg.Out. It returns the process's exit code.
func candidateChild(raw string) int {
	return runChild(raw, "chaos candidate", campaign, func(c candidateConfig) string { return c.Out })
}

// fenceScript is the fencing store: it takes a term that is at least the
// highest it has taken (1), and refuses a lower one (0).
var fenceScript = redis.NewScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) < cur then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1`)

// campaign runs one process's candidates until the run's duration has
// passed.
func campaign(ctx context.Context, cfg candidateConfig) candidateResult {
	client, store, err := joinRun(ctx, cfg.Nodes, &cfg.Client, cfg.Store, cfg.Procs, cfg.Start)
	if err != nil {
		return candidateResult{Err: err.Error()}
	}
	defer client.Close()
	defer store.Close()
	e := client.Election(cfg.ElectionName)
	// done reports whether the run is over, from the counts on the store.
	done := func() bool {
		now := time.Now()
		if now.After(cfg.Start.Add(cfg.MaxDuration)) {
			return true
		}
		counts, err := store.MGet(ctx, "tenures", "lost").Result()
		n, lost := 0, 0
		if err == nil {
			n, _ = strconv.Atoi(fmt.Sprint(counts[0]))
			lost, _ = strconv.Atoi(fmt.Sprint(counts[1]))
		}
		return now.After(cfg.Start.Add(cfg.MinDuration)) && n >= cfg.Target && lost >= cfg.MinLost
	}
	margin := cfg.TTL / 4 // covers the store's round trip, as in contend
	var mu sync.Mutex
	out := candidateResult{Failed: map[string]int{}}
	var wg sync.WaitGroup
	for w := range cfg.Candidates {
		wg.Go(func() {
			id := cfg.Proc*1000 + w
			var mine []Tenure
			for !done() {
				call := time.Now().UnixNano()
				cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				lead, err := e.Campaign(cctx, strconv.Itoa(id), cfg.TTL)
				cancel()
				if err != nil {
					mu.Lock()
					out.Failed[failure(err)]++
					mu.Unlock()
					time.Sleep(rand.N(cfg.TTL / 4)) // some errors come at once (ErrFenceUnknown)
					continue
				}
				tn := Tenure{Attempt: locktest.Attempt{Key: cfg.ElectionName, Client: id, Call: call, Obtained: time.Now().UnixNano(), OK: true}, Term: lead.Term()}
				act(ctx, store, cfg, lead, margin, &tn)
				select {
				case <-lead.Done(): // Done checks the validity itself
					tn.Lost = true
					store.Incr(ctx, "lost")
				default:
				}
				store.Incr(ctx, "tenures")
				until := lead.Until()
				resign := time.Now()
				_ = lead.Resign(ctx)
				tn.End = max(min(resign.UnixNano(), until.UnixNano()), tn.Obtained)
				mine = append(mine, tn)
			}
			mu.Lock()
			defer mu.Unlock()
			out.Tenures = append(out.Tenures, mine...)
		})
	}
	wg.Wait()
	return out
}

// act is one leadership's work: up to 8 writes of its term, a little
// apart, each only while Done is open and the validity has more than margin
// left, unless the candidate is careless.
func act(ctx context.Context, store *redis.Client, cfg candidateConfig, lead *redlock.Leadership, margin time.Duration, tn *Tenure) {
	for range 1 + rand.IntN(8) {
		at := time.Now()
		if !cfg.Careless {
			select {
			case <-lead.Done():
				return
			default:
			}
			if lead.Until().Sub(at) < margin {
				return
			}
		}
		n, err := fenceScript.Run(ctx, store, []string{cfg.Fence}, tn.Term).Int()
		if err == nil {
			tn.Writes = append(tn.Writes, FencedWrite{At: at.UnixNano(), Accepted: n == 1})
		}
		time.Sleep(rand.N(cfg.TTL / 6))
	}
}

// TestCheckElection: the election checker finds overlapping tenures, terms
// that do not increase, and writes decided outside their tenure, and
// leaves out of the term order a tenure of no length.
func TestCheckElection(t *testing.T) {
	tenure := func(obtained, end int64, term uint64, writes ...FencedWrite) Tenure {
		return Tenure{Attempt: locktest.Attempt{Key: "e", OK: true, Obtained: obtained, End: end}, Term: term, Writes: writes}
	}
	var clean ElectionResult
	checkElection(&clean, []Tenure{
		tenure(0, 10, 1, FencedWrite{At: 5, Accepted: true}),
		tenure(12, 12, 0), // no length: a leader paused as Campaign returned
		tenure(20, 30, 2, FencedWrite{At: 20, Accepted: true}),
	}, nil)
	assert.Empty(t, clean.Overlaps)
	assert.Zero(t, clean.TermInversions+clean.Outside+clean.Refused+clean.StaleAccepted)
	assert.Equal(t, 2, clean.Writes)
	assert.Contains(t, clean.String(), "faults: kill=0 pause=0 partition=0 client-partition=0 latency=0;", "every kind of AllFaults, none injected")

	var bad ElectionResult
	checkElection(&bad, []Tenure{
		tenure(0, 10, 2, FencedWrite{At: 11, Accepted: true}, FencedWrite{At: 15, Accepted: false}),
		tenure(8, 20, 1, FencedWrite{At: 9, Accepted: true}),
	}, nil)
	assert.Len(t, bad.Overlaps, 1)
	assert.Equal(t, 1, bad.TermInversions)
	assert.Equal(t, 2, bad.Outside)
	assert.Equal(t, 1, bad.Refused)
	assert.Equal(t, 1, bad.StaleAccepted)
}
