package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/redquorum/redquorum/internal/testkit/loadtest"
)

// figure is one number compared between the two implementations.
type figure struct {
	name      string
	base, our float64
	unit      string // "ms", "/s", "" (count) or "ratio"
	target    string // human-readable, empty for none
	ok        func(base, our float64) bool
}

// compare prints a Markdown table: each figure for base and ours, their
// ratio, and, with targets (redsync against redquorum), the target
// when there is one.
func compare(w io.Writer, results []loadtest.Result, baseName, ourName string, targets bool) {
	get := func(impl, id string) *loadtest.Result {
		for i := range results {
			if results[i].Impl == impl && results[i].Scenario == id {
				return &results[i]
			}
		}
		return nil
	}
	ms := func(r *loadtest.Result, p float64) float64 {
		d := map[float64]float64{50: float64(r.Latency.P50), 90: float64(r.Latency.P90), 99: float64(r.Latency.P99), 99.9: float64(r.Latency.P999)}[p]
		return d / 1e6
	}
	var figs []figure
	if b, o := get(baseName, "distinct-1"), get(ourName, "distinct-1"); b != nil && o != nil {
		figs = append(figs,
			figure{"1 caller: lock+unlock p50", ms(b, 50), ms(o, 50), "ms", "≤ 0.7×", func(b, o float64) bool { return o <= 0.7*b }},
			figure{"1 caller: lock+unlock p99", ms(b, 99), ms(o, 99), "ms", "", nil},
			figure{"1 caller: lock+unlock p99.9", ms(b, 99.9), ms(o, 99.9), "ms", "", nil},
			figure{"1 caller: allocations per lock+unlock", b.AllocsPerOp, o.AllocsPerOp, "", "≤ 0.5×", func(b, o float64) bool { return o <= 0.5*b }},
			figure{"1 caller: bytes allocated per lock+unlock", b.BytesPerOp, o.BytesPerOp, "B", "", nil},
		)
		if bs, os := get(baseName, "slow-1"), get(ourName, "slow-1"); bs != nil && os != nil {
			healthy := ms(o, 50)
			figs = append(figs,
				figure{"1 caller, one node slow: lock+unlock p50", ms(bs, 50), ms(os, 50), "ms", fmt.Sprintf("ours ≤ 1.3× our healthy p50 (%.3f ms)", healthy), func(_, x float64) bool { return x <= 1.3*healthy }},
				figure{"1 caller, one node slow: lock+unlock p99", ms(bs, 99), ms(os, 99), "ms", "", nil},
			)
		}
	}
	for _, r := range results {
		if r.Impl != ourName || !strings.HasPrefix(r.Scenario, "distinct-") || r.Callers == 1 {
			continue
		}
		b := get(baseName, r.Scenario)
		n := fmt.Sprintf("%d callers, distinct keys: ", r.Callers)
		figs = append(figs,
			figure{n + "lock+unlock/s", b.PerSec, r.PerSec, "/s", "≥ 1.3×", func(b, o float64) bool { return o >= 1.3*b }},
			figure{n + "lock+unlock p50", ms(b, 50), ms(&r, 50), "ms", "", nil},
			figure{n + "lock+unlock p99", ms(b, 99), ms(&r, 99), "ms", "", nil},
		)
	}
	for _, r := range results {
		if r.Impl != ourName || !strings.HasPrefix(r.Scenario, "hotkey-") {
			continue
		}
		b := get(baseName, r.Scenario)
		n := fmt.Sprintf("hot key, %d contenders: ", r.Callers)
		if strings.HasSuffix(r.Scenario, "-clients") {
			n = fmt.Sprintf("hot key, %d separate clients: ", r.Callers)
		}
		figs = append(figs,
			figure{n + "acquisitions/s", b.PerSec, r.PerSec, "/s", "≥ 1.2×", func(b, o float64) bool { return o >= 1.2*b }},
			figure{n + "wait p50", ms(b, 50), ms(&r, 50), "ms", "", nil},
			figure{n + "wait p99", ms(b, 99), ms(&r, 99), "ms", "≤ 0.1×", func(b, o float64) bool { return o <= 0.1*b }},
			figure{n + "smallest share / largest", b.ShareRatio(), r.ShareRatio(), "ratio", "ours ≥ 0.5", func(_, o float64) bool { return o >= 0.5 }},
			figure{n + "failed Lock calls", float64(b.Errors), float64(r.Errors), "", "", nil},
		)
	}
	for _, r := range results {
		if r.Impl != ourName || !strings.HasPrefix(r.Scenario, "shared-") {
			continue
		}
		b := get(baseName, r.Scenario)
		n := strings.TrimSuffix(r.Title, " (wait)") + ": "
		figs = append(figs,
			figure{n + "acquisitions/s", b.PerSec, r.PerSec, "/s", "", nil},
			figure{n + "wait p50", ms(b, 50), ms(&r, 50), "ms", "", nil},
			figure{n + "wait p99", ms(b, 99), ms(&r, 99), "ms", "", nil},
			figure{n + "failed Lock calls", float64(b.Errors), float64(r.Errors), "", "", nil},
		)
	}
	fmt.Fprintf(w, "| figure | %s | %s | ratio | target |\n|---|---:|---:|---:|---|\n", baseName, ourName)
	for _, f := range figs {
		ratio := "-"
		if f.base != 0 {
			ratio = fmt.Sprintf("%.2f", f.our/f.base)
		}
		target := f.target
		if !targets {
			target = ""
		} else if f.ok != nil {
			if f.ok(f.base, f.our) {
				target += " ✓"
			} else {
				target += " ✗"
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", f.name, num(f.base, f.unit), num(f.our, f.unit), ratio, target)
	}
}

func num(v float64, unit string) string {
	switch unit {
	case "ms":
		return fmt.Sprintf("%.3g ms", v)
	case "/s":
		return fmt.Sprintf("%.0f/s", v)
	case "B":
		return fmt.Sprintf("%.0f B", v)
	case "ratio":
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.0f", v)
}
