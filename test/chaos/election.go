package chaos

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/redquorum/redquorum/locktest"
)

// Tenure is one leadership: Obtained is when Campaign returned, End the
// earlier of the start of Resign and the leadership's last validity.
type Tenure struct {
	locktest.Attempt
	Term   uint64
	Writes []FencedWrite
	Lost   bool // Done was closed when the leader stopped: lost, not resigned
}

// FencedWrite is one write of a leader's term to the fencing store. At is
// when the leader decided to write, before its checks.
type FencedWrite struct {
	At       int64
	Accepted bool
}

// ElectionResult is what a [RunElection] observed.
type ElectionResult struct {
	Tenures        int
	Lost           int // tenures whose leader found them lost
	ByProc         []int
	Pauses         int                        // SIGSTOPs of candidate processes
	Faults         map[locktest.FaultKind]int // faults injected, by kind
	Overlaps       []locktest.Overlap         // tenures inside their validity at once
	TermInversions int                        // consecutive tenures whose terms did not increase
	Writes         int
	Outside        int // writes decided outside the writer's tenure
	Refused        int // writes the store refused: a higher term had written
	StaleAccepted  int // writes decided outside the writer's tenure that the store took
	// Observed counts the leaders that Observe reported in this process;
	// ObservedInversions those whose term was lower than the one before.
	Observed, ObservedInversions int
	Leftover                     []string
	Timeline                     string         // locktest's timeline of a run with overlaps
	Failed                       map[string]int // failed campaigns, by error message (see failure)
}

// String is the summary line of the run.
func (r *ElectionResult) String() string {
	return fmt.Sprintf("%d leaderships (by process: %v, %d found lost), %d pauses, %d writes, %d leaders observed; faults: %s; violations: overlaps=%d term inversions=%d (observed: %d) decided outside the tenure=%d (refused by the store=%d, stale but taken=%d); leftover keys=%d",
		r.Tenures, r.ByProc, r.Lost, r.Pauses, r.Writes, r.Observed, faultSummary(r.Faults), len(r.Overlaps), r.TermInversions, r.ObservedInversions, r.Outside, r.Refused, r.StaleAccepted, len(r.Leftover)) + failedSummary(r.Failed)
}

// failedSummary is the failed campaigns' part of a summary line: the
// count of each error, most frequent first, at most five of them.
func failedSummary(failed map[string]int) string {
	msgs := slices.Collect(maps.Keys(failed))
	if len(msgs) == 0 {
		return ""
	}
	slices.SortFunc(msgs, func(a, b string) int { return cmp.Or(cmp.Compare(failed[b], failed[a]), cmp.Compare(a, b)) })
	var b strings.Builder
	b.WriteString("; failed campaigns by cause:")
	for i, m := range msgs {
		if i == 5 {
			fmt.Fprintf(&b, " (%d more causes)", len(msgs)-i)
			break
		}
		fmt.Fprintf(&b, " %d× %q", failed[m], m)
	}
	return b.String()
}

// failure is the message under which a failed campaign is counted: the
// error's text with its node addresses and numbers masked, so that one
// cause on several nodes, or with several durations, counts once.
func failure(err error) string {
	return digits.ReplaceAllString(err.Error(), "N")
}

var digits = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)

// faultSummary is the faults part of a summary line: the count of each kind
// of locktest.AllFaults, and of the other kinds that counts has.
func faultSummary(counts map[locktest.FaultKind]int) string {
	all := locktest.AllFaults()
	var kinds []string
	for _, k := range locktest.ReplicatedFaults() {
		if _, ok := counts[k]; ok || slices.Contains(all, k) {
			kinds = append(kinds, fmt.Sprintf("%s=%d", k, counts[k]))
		}
	}
	return strings.Join(kinds, " ")
}

// checkElection fills r's counts from the tenures of a run and the faults
// injected meanwhile, and returns locktest's report of the tenures (for its
// timeline).
func checkElection(r *ElectionResult, tenures []Tenure, faults []locktest.Fault) *locktest.Report {
	attempts := make([]locktest.Attempt, len(tenures))
	for i, tn := range tenures {
		attempts[i] = tn.Attempt
	}
	r.Tenures = len(tenures)
	for _, tn := range tenures {
		if tn.Lost {
			r.Lost++
		}
	}
	report := locktest.Check(attempts, faults)
	r.Overlaps = report.Overlaps
	slices.SortFunc(tenures, func(a, b Tenure) int { return cmp.Compare(a.Obtained, b.Obtained) })
	var last *Tenure
	for i, tn := range tenures {
		// A tenure of no length had no validity left when its leader
		// looked (a pause right after Campaign returned): its Obtained
		// is not when it led, and it is left out of the order.
		if tn.End > tn.Obtained {
			if last != nil && tn.Term <= last.Term {
				r.TermInversions++
			}
			last = &tenures[i]
		}
		for _, w := range tn.Writes {
			r.Writes++
			outside := w.At < tn.Obtained || w.At > tn.End
			switch {
			case !w.Accepted:
				r.Refused++
			case outside:
				r.StaleAccepted++
			}
			if outside {
				r.Outside++
			}
		}
	}
	return report
}
