package locktest

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Report is what the checkers found in a history. It holds the faults
// injected meanwhile, which its timeline shows.
type Report struct {
	History  []Attempt
	Faults   []Fault
	Overlaps []Overlap         // from CheckOverlaps
	Fences   []FenceRegression // from CheckFences
	// Limit is the permits of the semaphore whose history this is, and 0
	// for a lock; Crowds are then from CheckLimit.
	Limit  int
	Crowds []Crowd
}

// Check runs the checkers of a lock or a read-write lock on history. These
// are [CheckOverlaps] and [CheckFences]. faults may be nil.
func Check(history []Attempt, faults []Fault) *Report {
	return &Report{History: history, Faults: faults, Overlaps: CheckOverlaps(history), Fences: CheckFences(history)}
}

// CheckSemaphore runs [CheckLimit], the checker of a semaphore of k permits,
// on history. A semaphore's holds share no fencing order, so it runs no
// fence check. faults may be nil.
func CheckSemaphore(history []Attempt, faults []Fault, k int) *Report {
	return &Report{History: history, Faults: faults, Limit: k, Crowds: CheckLimit(history, k)}
}

// OK reports whether the checkers found nothing.
func (r *Report) OK() bool { return len(r.Overlaps) == 0 && len(r.Fences) == 0 && len(r.Crowds) == 0 }

// String returns the report's summary line. It gives the holds, failed
// attempts, faults by kind and violations.
func (r *Report) String() string {
	holds := 0
	for _, a := range r.History {
		if a.OK {
			holds++
		}
	}
	n := Count(r.Faults)
	var kinds []string
	for _, k := range ReplicatedFaults() {
		if n[k] > 0 {
			kinds = append(kinds, fmt.Sprintf("%s=%d", k, n[k]))
		}
	}
	var span time.Duration
	if tl := r.layout(); tl.t1 > tl.t0 {
		span = time.Duration(tl.t1 - tl.t0).Round(time.Millisecond)
	}
	violations := fmt.Sprintf("overlaps=%d fence regressions=%d", len(r.Overlaps), len(r.Fences))
	if r.Limit > 0 {
		violations = fmt.Sprintf("over %d holders=%d", r.Limit, len(r.Crowds))
	}
	return fmt.Sprintf("%d holds, %d failed attempts in %v; faults: %s; violations: %s",
		holds, len(r.History)-holds, span, cmp.Or(strings.Join(kinds, " "), "none"), violations)
}

// Verify checks history as [Check] does, and logs the report's summary.
// When a checker finds a violation, Verify fails t with the first few. It
// then writes the timeline ([Report.WriteTimeline]) to a file that outlives
// the test, and names it in the failure. The file is in the directory of
// the environment variable LOCKTEST_DIR, or else the temporary directory.
func Verify(t testing.TB, history []Attempt, faults []Fault) *Report {
	t.Helper()
	return verify(t, Check(history, faults))
}

// VerifySemaphore is [Verify] with the checker of a semaphore of k permits
// ([CheckSemaphore]).
func VerifySemaphore(t testing.TB, history []Attempt, faults []Fault, k int) *Report {
	t.Helper()
	return verify(t, CheckSemaphore(history, faults, k))
}

// verify logs r's summary. When r is not OK, it fails t with the first few
// violations and the timeline's path.
func verify(t testing.TB, r *Report) *Report {
	t.Helper()
	t.Log("locktest: " + r.String())
	if r.OK() {
		return r
	}
	path, err := r.keepTimeline(t.Name())
	if err != nil {
		path = fmt.Sprintf("(not written: %v)", err)
	}
	var lines []string
	for _, o := range r.Overlaps[:min(len(r.Overlaps), 3)] {
		lines = append(lines, o.String())
	}
	for _, f := range r.Fences[:min(len(r.Fences), 3)] {
		lines = append(lines, f.String())
	}
	for _, c := range r.Crowds[:min(len(r.Crowds), 3)] {
		lines = append(lines, c.String())
	}
	t.Errorf("locktest: %s\n%s\ntimeline: %s", r, strings.Join(lines, "\n"), path)
	return r
}

// keepTimeline writes the timeline to a new file named after the test, and
// returns its path. The file is in LOCKTEST_DIR or the temporary directory.
func (r *Report) keepTimeline(test string) (string, error) {
	dir := os.Getenv("LOCKTEST_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	name := regexp.MustCompile(`[^A-Za-z0-9_-]+`).ReplaceAllString(test, "_")
	f, err := os.CreateTemp(dir, "locktest-"+name+"-*.svg")
	if err != nil {
		return "", err
	}
	path, _ := filepath.Abs(f.Name())
	f.Close()
	return path, r.WriteTimeline(path)
}
