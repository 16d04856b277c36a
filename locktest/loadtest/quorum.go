package loadtest

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redquorum/redquorum/redlock"
)

// QuorumLatency describes the lock rounds that obtained a lock in one
// scenario. It holds each node's latency and how often it decided the round.
// It also holds the round's latency beside the answer of the quorum-th
// fastest node, the node that decided it.
type QuorumLatency struct {
	Quorum int           `json:"quorum"`
	Rounds int           `json:"rounds"`
	Nodes  []NodeLatency `json:"nodes"`
	Round  Dist          `json:"round"`    // the round, until it was decided
	Kth    Dist          `json:"kth_node"` // the quorum-th fastest node's answer
}

// NodeLatency is one node's part in the rounds of a [QuorumLatency].
type NodeLatency struct {
	Node    string  `json:"node"`
	Latency Dist    `json:"latency"` // its answers, granted or not
	Decided float64 `json:"decided"` // the share of the rounds it decided
}

// QuorumRecorder collects a [QuorumLatency] from the events of a
// [redlock.Observer]. Set its End as the Observer's End, or call it from
// yours. Its methods are safe for concurrent use.
type QuorumRecorder struct {
	mu      sync.Mutex
	quorum  int
	names   []string
	lat     [][]time.Duration
	decided []int
	rounds  []time.Duration
	kth     []time.Duration
}

// NewQuorumRecorder returns a recorder for rounds that need quorum nodes.
func NewQuorumRecorder(quorum int) *QuorumRecorder { return &QuorumRecorder{quorum: quorum} }

// End records the round that obtained the lock of a Lock or TryLock event.
func (q *QuorumRecorder) End(_ context.Context, e redlock.Event) {
	if e.Op != redlock.OpLock && e.Op != redlock.OpTryLock || e.Err != nil || len(e.Rounds) == 0 {
		return
	}
	r := e.Rounds[len(e.Rounds)-1]
	var granted []time.Duration
	for _, v := range r.Nodes {
		if v.Outcome == redlock.VoteGranted {
			granted = append(granted, v.Latency)
		}
	}
	if len(granted) < q.quorum {
		return
	}
	slices.Sort(granted)
	kth := granted[q.quorum-1]
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.names == nil {
		for _, v := range r.Nodes {
			q.names = append(q.names, v.Node)
		}
		q.lat = make([][]time.Duration, len(r.Nodes))
		q.decided = make([]int, len(r.Nodes))
	}
	decider := slices.IndexFunc(r.Nodes, func(v redlock.Vote) bool { // the first of equal latencies
		return v.Outcome == redlock.VoteGranted && v.Latency == kth
	})
	for i, v := range r.Nodes {
		if i >= len(q.lat) {
			break
		}
		if v.Outcome.Answered() {
			q.lat[i] = append(q.lat[i], v.Latency)
		}
		if i == decider {
			q.decided[i]++
		}
	}
	q.rounds = append(q.rounds, r.Duration)
	q.kth = append(q.kth, kth)
}

// Take returns what was recorded since the last Take, nil for nothing.
func (q *QuorumRecorder) Take() *QuorumLatency {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.rounds) == 0 {
		return nil
	}
	out := &QuorumLatency{Quorum: q.quorum, Rounds: len(q.rounds), Round: sortedDist(q.rounds), Kth: sortedDist(q.kth)}
	for i, name := range q.names {
		out.Nodes = append(out.Nodes, NodeLatency{Node: name, Latency: sortedDist(q.lat[i]), Decided: float64(q.decided[i]) / float64(len(q.rounds))})
	}
	q.names, q.lat, q.decided, q.rounds, q.kth = nil, nil, nil, nil, nil
	return out
}

// sortedDist sorts s and returns its distribution.
func sortedDist(s []time.Duration) Dist {
	slices.Sort(s)
	return dist(s)
}

// WriteQuorumTable writes a table for each result with a [QuorumLatency].
// It shows each node's latency percentiles and the share of the rounds it
// decided, and the rounds' latency beside the quorum-th fastest node's.
func WriteQuorumTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	found := false
	for _, r := range results {
		q := r.Quorum
		if q == nil {
			continue
		}
		if !found {
			fmt.Fprintln(tw, "scenario\tnode\tp50\tp90\tp99\tdecided")
			found = true
		}
		for _, n := range q.Nodes {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.0f%%\n", r.Title, n.Node, Ms(n.Latency.P50), Ms(n.Latency.P90), Ms(n.Latency.P99), 100*n.Decided)
		}
		fmt.Fprintf(tw, "%s\tround (%d, quorum %d)\t%s\t%s\t%s\t\n", r.Title, q.Rounds, q.Quorum, Ms(q.Round.P50), Ms(q.Round.P90), Ms(q.Round.P99))
		fmt.Fprintf(tw, "%s\tquorum-th fastest node\t%s\t%s\t%s\t\n", r.Title, Ms(q.Kth.P50), Ms(q.Kth.P90), Ms(q.Kth.P99))
	}
	if !found {
		return nil
	}
	fmt.Fprintln(w, "\nEach node's latency in the lock rounds that obtained a lock, and the share of those rounds it decided (the quorum-th fastest to grant):")
	return tw.Flush()
}
