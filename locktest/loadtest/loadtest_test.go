package loadtest

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/redisproc"
	"github.com/redquorum/redquorum/redlock"
)

func TestMerge(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		s := make([]time.Duration, len(v))
		for i, x := range v {
			s[i] = time.Duration(x) * time.Millisecond
		}
		return s
	}
	a := Result{Impl: "x", Ops: 2, Seconds: 1, AllocsPerOp: 10, BytesPerOp: 100, Shares: []int{1, 1}, samples: ms(1, 3), holds: ms(1, 2)}
	b := Result{Impl: "x", Ops: 3, Errors: 1, Seconds: 2, AllocsPerOp: 20, BytesPerOp: 200, Shares: []int{2, 1}, samples: ms(2, 4, 5), FirstError: "boom", holds: ms(6)}
	m := Merge([]Result{a, b})
	assert.Equal(t, 5, m.Ops)
	assert.Equal(t, 1, m.Errors)
	assert.InDelta(t, 3.0, m.Seconds, 1e-9)
	assert.InDelta(t, 5.0/3, m.PerSec, 1e-9)
	assert.InDelta(t, 16.0, m.AllocsPerOp, 1e-9, "weighted by operations")
	assert.InDelta(t, 160.0, m.BytesPerOp, 1e-9)
	assert.Equal(t, []int{3, 2}, m.Shares)
	assert.Equal(t, "boom", m.FirstError)
	assert.True(t, slices.IsSorted(m.samples))
	assert.Equal(t, 3*time.Millisecond, m.Latency.P50)
	assert.Equal(t, 5*time.Millisecond, m.Latency.Max)
	assert.Equal(t, 3*time.Millisecond, m.Latency.Mean)
	assert.Equal(t, 2*time.Millisecond, m.Hold.P50, "the holds are pooled")
	assert.Equal(t, 3*time.Millisecond, m.Hold.Mean)
	assert.Equal(t, []int{1, 1}, a.Shares, "the inputs are not changed")
}

// TestHoldGaps: the gap from each Unlock call to the next hold's start, and
// a hold that began before the previous one ended counts as an overlap (the
// check of the bench's separate-process scenario).
func TestHoldGaps(t *testing.T) {
	gaps, overlaps := holdGaps([]Hold{{Obtained: 30, Released: 40}, {Obtained: 0, Released: 10}, {Obtained: 12, Released: 25}})
	assert.Equal(t, []time.Duration{2, 5}, gaps)
	assert.Zero(t, overlaps)

	gaps, overlaps = holdGaps([]Hold{{Obtained: 0, Released: 10}, {Obtained: 5, Released: 20}, {Obtained: 15, Released: 30}, {Obtained: 31, Released: 40}})
	assert.Equal(t, 2, overlaps, "5 < 10, and 15 < 20")
	assert.Equal(t, []time.Duration{1}, gaps)
}

// TestGatherHolds: a hot key's holds, from Lock returned to Unlock called,
// and the gaps between them.
func TestGatherHolds(t *testing.T) {
	ms := int64(time.Millisecond)
	callers := []caller{
		{Samples: make([]time.Duration, 2), Holds: []Hold{{Obtained: 0, Released: 1 * ms}, {Obtained: 4 * ms, Released: 7 * ms}}},
		{Samples: make([]time.Duration, 1), Holds: []Hold{{Obtained: 2 * ms, Released: 4 * ms}}},
	}
	r := gather(callers, Scenario{HotKey: true}, time.Second)
	assert.Equal(t, 2*time.Millisecond, r.Hold.Mean)
	assert.Equal(t, 3*time.Millisecond, r.Hold.Max)
	assert.Equal(t, time.Millisecond/2, r.Gap.Mean, "1 ms, then 0")
	assert.Equal(t, []int{2, 1}, r.Shares)
}

// TestRunProcsNeedsSpawn: a scenario of processes needs a Runner that can
// start them.
func TestRunProcsNeedsSpawn(t *testing.T) {
	var r Runner
	_, err := r.Run(t.Context(), Impl{Name: "x"}, Scenario{ID: "p", Callers: 2, Procs: true}, []string{"127.0.0.1:1"})
	assert.ErrorContains(t, err, "has no Spawn")
}

// TestStatTicks: utime and stime are fields 14 and 15 of /proc/PID/stat,
// counted after a command name that may hold spaces and parentheses.
func TestStatTicks(t *testing.T) {
	line := "4242 (redis-server ) :1) S 1 4242 4242 0 -1 4194560 1234 0 0 0 731 269 0 0 20 0 5 0 99 0 0"
	n, err := statTicks(line)
	require.NoError(t, err)
	assert.EqualValues(t, 731+269, n)
	for _, bad := range []string{"4242 redis-server S 1", "4242 (x) S 1 2 3", "4242 (x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 u 269"} {
		_, err := statTicks(bad)
		assert.Error(t, err, bad)
	}
	self, err := nodeTicks([]int{os.Getpid(), 0})
	require.NoError(t, err, "this process's own stat, and a server that is gone")
	assert.GreaterOrEqual(t, self, int64(0))
	_, err = nodeTicks([]int{-1})
	assert.Error(t, err)
}

// TestNodeCPU: ticks of 10 ms per operation in µs, pooled by Merge over
// every operation, marked coarse below CoarseTicks in the table.
func TestNodeCPU(t *testing.T) {
	c := newNodeCPU(50, 2000) // 500 ms over 2000 operations
	assert.InDelta(t, 250.0, c.PerOp, 1e-9)
	assert.True(t, c.Coarse())
	assert.Equal(t, "~250", c.String())
	assert.Equal(t, "-", (*NodeCPU)(nil).String())

	m := Merge([]Result{{Ops: 2000, NodeCPU: c}, {Ops: 1000, NodeCPU: newNodeCPU(100, 1000)}})
	require.NotNil(t, m.NodeCPU)
	assert.EqualValues(t, 150, m.NodeCPU.Ticks)
	assert.InDelta(t, 500.0, m.NodeCPU.PerOp, 1e-9, "1.5 s over 3000 operations")
	assert.False(t, m.NodeCPU.Coarse())
	assert.Equal(t, "500", m.NodeCPU.String())
	assert.Nil(t, Merge([]Result{{Ops: 1}}).NodeCPU, "not measured stays nil")

	var b strings.Builder
	require.NoError(t, WriteTable(&b, []Result{{Impl: "x", Title: "t", Ops: 2000, NodeCPU: c}}))
	assert.Contains(t, b.String(), "~250")
	assert.Contains(t, b.String(), "fewer than 100 clock ticks")
}

// TestNodePIDs: the servers' processes are readable while they run, and a
// killed server counts nothing.
func TestNodePIDs(t *testing.T) {
	s := redisproc.StartT(t, 2)
	pids := s.PIDs()
	require.Len(t, pids, 2)
	assert.Positive(t, pids[0])
	_, err := nodeTicks(pids)
	require.NoError(t, err)
	s.Kill(1)
	assert.Equal(t, []int{pids[0], 0}, s.PIDs())
}

// TestHoldFor: a blocking hold lasts at least its time, as a sleeping one
// does.
func TestHoldFor(t *testing.T) {
	for _, blocking := range []bool{false, true} {
		sc := Scenario{Hold: 2 * time.Millisecond, HoldBlocking: blocking}
		start := time.Now()
		holdFor(sc)
		if took := time.Since(start); took < sc.Hold {
			t.Errorf("blocking=%v: held %v, want at least %v", blocking, took, sc.Hold)
		}
	}
}

// TestParseCommandStats: the calls and times of INFO commandstats, summed
// over nodes, with a subcommand's name kept whole.
func TestParseCommandStats(t *testing.T) {
	calls, usec := map[string]int64{}, map[string]int64{}
	node := "# Commandstats\r\ncmdstat_evalsha:calls=10,usec=250,usec_per_call=25.00,rejected_calls=0,failed_calls=0\r\ncmdstat_config|resetstat:calls=1,usec=3,usec_per_call=3.00,rejected_calls=0,failed_calls=0\r\n"
	require.NoError(t, parseCommandStats(node, calls, usec))
	require.NoError(t, parseCommandStats(node, calls, usec))
	assert.Equal(t, map[string]int64{"evalsha": 20, "config|resetstat": 2}, calls)
	assert.Equal(t, map[string]int64{"evalsha": 500, "config|resetstat": 6}, usec)
	require.ErrorContains(t, parseCommandStats("cmdstat_get:calls=x,usec=1\r\n", calls, usec), "get")

	c := mergeCommands([]*Commands{newCommands(map[string]int64{"get": 4}, map[string]int64{"get": 8}, 2), nil, newCommands(map[string]int64{"get": 2}, map[string]int64{"get": 4}, 2)})
	assert.InDelta(t, 1.5, c.Per["get"], 1e-9)
	assert.Equal(t, "get 1.50 (2.0 µs)", c.String())
	assert.Nil(t, mergeCommands([]*Commands{nil}))
	two := newCommands(map[string]int64{"set": 2, "get": 2, "del": 1}, map[string]int64{"set": 2, "get": 2, "del": 1}, 1)
	assert.Equal(t, "get 2.00 (1.0 µs), set 2.00 (1.0 µs), del 1.00 (1.0 µs)", two.String(), "most calls first, ties by name")
}

// TestProgressNotTerminal: progress written to something that is not a
// terminal (a log, a CI job's output) is one line per run, without the
// carriage returns that rewrite a terminal's line.
func TestProgressNotTerminal(t *testing.T) {
	var b bytes.Buffer
	r := &Runner{Progress: &b}
	stop := r.progress("redquorum", Scenario{Title: "one caller", Duration: time.Second})
	stop()
	assert.NotContains(t, b.String(), "\r")
	assert.Equal(t, 1, strings.Count(b.String(), "\n"), "one line: %q", b.String())
	assert.Contains(t, b.String(), "one caller")
	assert.False(t, terminal(&b))
	f, err := os.CreateTemp(t.TempDir(), "log")
	require.NoError(t, err)
	defer f.Close()
	assert.False(t, terminal(f), "a file is no terminal")
}

// TestQuorumRecorder: of each Lock that obtained its lock, the recorder
// counts the quorum-th fastest granting node as the round's decider, keeps
// every answered node's latency, and leaves out failed Locks, other
// operations and pending nodes.
func TestQuorumRecorder(t *testing.T) {
	q := NewQuorumRecorder(2)
	ms := time.Millisecond
	round := func(lat ...time.Duration) redlock.Event {
		r := redlock.Round{Duration: 9 * ms}
		for i, l := range lat {
			v := redlock.Vote{Node: fmt.Sprint("n", i), Outcome: redlock.VoteGranted, Latency: l}
			if l == 0 {
				v.Outcome = redlock.VotePending
			}
			r.Nodes = append(r.Nodes, v)
		}
		return redlock.Event{Op: redlock.OpLock, Rounds: []redlock.Round{r}}
	}
	q.End(t.Context(), round(1*ms, 2*ms, 0)) // n1 decides
	q.End(t.Context(), round(3*ms, 2*ms, 0)) // n0 decides
	q.End(t.Context(), round(5*ms, 1*ms, 0)) // n0 decides
	failed := round(1*ms, 1*ms, 1*ms)
	failed.Err = redlock.ErrNotObtained
	q.End(t.Context(), failed)
	unlock := round(1*ms, 1*ms, 1*ms)
	unlock.Op = redlock.OpUnlock
	q.End(t.Context(), unlock)
	got := q.Take()
	require.NotNil(t, got)
	assert.Equal(t, 3, got.Rounds)
	assert.InDelta(t, 2.0/3, got.Nodes[0].Decided, 1e-9)
	assert.InDelta(t, 1.0/3, got.Nodes[1].Decided, 1e-9)
	assert.Zero(t, got.Nodes[2].Decided, "a node that never answered decides nothing")
	assert.Equal(t, 5*ms, got.Kth.Max, "the quorum-th fastest of the slowest round")
	assert.Equal(t, 3*ms, got.Nodes[0].Latency.P50)
	assert.Nil(t, q.Take(), "Take starts over")
	var b bytes.Buffer
	require.NoError(t, WriteQuorumTable(&b, []Result{{Title: "s", Quorum: got}}))
	assert.Contains(t, b.String(), "quorum-th fastest node")
}
