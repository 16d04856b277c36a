package loadtest

import (
	"cmp"
	"slices"
	"time"
)

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
	// Gap is, for a hot key, the time from a holder's Unlock call to
	// the next holder's Lock returning; Overlaps counts holds that began
	// before the previous one's Unlock call (0 for a lock).
	Gap      Dist `json:"gap"`
	Overlaps int  `json:"overlaps"`
	// Hold is, for a hot key, the time from Lock returning to the Unlock
	// call: the scenario's hold as the holder's process kept it. With the
	// mean gap it makes the cycle that the rate is the inverse of.
	Hold Dist `json:"hold"`
	// NodeCPU is the CPU time of the nodes' processes per operation, when
	// the Runner knows them (Runner.NodePIDs); nil otherwise.
	NodeCPU *NodeCPU `json:"node_cpu,omitempty"`
	// ClientCPU is the CPU time of the callers' processes per operation:
	// this process for callers in it, the worker processes otherwise. It
	// includes the load generator's own bookkeeping, the same for every
	// implementation.
	ClientCPU *NodeCPU `json:"client_cpu,omitempty"`
	// Commands counts the commands the nodes ran, when the Runner counts
	// them (Runner.CountCommands); nil otherwise.
	Commands *Commands `json:"commands,omitempty"`
	// Quorum is each node's part in the rounds that obtained a lock, when
	// the implementation's rounds were observed (see QuorumRecorder); nil
	// otherwise.
	Quorum *QuorumLatency `json:"quorum,omitempty"`

	samples []time.Duration // sorted
	gaps    []time.Duration // sorted
	holds   []time.Duration // sorted
}

// ShareRatio returns the smallest contender's share divided by the largest's
// (1 is perfectly fair), or 0 when there are no shares.
func (r *Result) ShareRatio() float64 {
	if len(r.Shares) == 0 || slices.Max(r.Shares) == 0 {
		return 0
	}
	return float64(slices.Min(r.Shares)) / float64(slices.Max(r.Shares))
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
	res.gaps, res.Overlaps = holdGaps(holds)
	res.Gap = dist(res.gaps)
	for _, h := range holds {
		res.holds = append(res.holds, time.Duration(h.Released-h.Obtained))
	}
	slices.Sort(res.holds)
	res.Hold = dist(res.holds)
	return res
}

// holdGaps sorts holds of one key by when they were obtained. It returns the
// time from each Unlock call to the next hold's start, sorted, and how many
// holds began before an earlier one was released.
func holdGaps(holds []Hold) (gaps []time.Duration, overlaps int) {
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
// scenario into one Result. The runs may be short ones alternated with
// another implementation's, so that both see the same drift in machine load.
// Samples, operations, errors, time and shares add up. Allocations are
// averaged over all operations.
func Merge(rs []Result) Result {
	if len(rs) == 0 {
		return Result{}
	}
	m := rs[0]
	m.samples, m.gaps, m.holds = nil, nil, nil
	m.Shares = nil
	m.Ops, m.Errors, m.Seconds, m.Overlaps = 0, 0, 0, 0
	var allocs, bytes float64
	var ticks, clientTicks int64
	var cmds []*Commands
	for _, r := range rs {
		cmds = append(cmds, r.Commands)
		if r.NodeCPU != nil {
			ticks += r.NodeCPU.Ticks
		}
		if r.ClientCPU != nil {
			clientTicks += r.ClientCPU.Ticks
		}
		m.samples = append(m.samples, r.samples...)
		m.gaps = append(m.gaps, r.gaps...)
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
	slices.Sort(m.gaps)
	m.Gap = dist(m.gaps)
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
	if m.ClientCPU != nil {
		m.ClientCPU = newNodeCPU(clientTicks, m.Ops)
	}
	m.Commands = mergeCommands(cmds)
	return m
}
