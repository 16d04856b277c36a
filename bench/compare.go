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
	unit      string // "ms", "µs", "/s", "B", "" (count) or "ratio"
}

// compare prints a Markdown table: each figure for base and ours, and their
// ratio.
func compare(w io.Writer, results []loadtest.Result, baseName, ourName string) {
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
			figure{"1 caller: lock+unlock p50", ms(b, 50), ms(o, 50), "ms"},
			figure{"1 caller: lock+unlock p99", ms(b, 99), ms(o, 99), "ms"},
			figure{"1 caller: lock+unlock p99.9", ms(b, 99.9), ms(o, 99.9), "ms"},
			figure{"1 caller: allocations per lock+unlock", b.AllocsPerOp, o.AllocsPerOp, ""},
			figure{"1 caller: bytes allocated per lock+unlock", b.BytesPerOp, o.BytesPerOp, "B"},
		)
		if bs, os := get(baseName, "slow-1"), get(ourName, "slow-1"); bs != nil && os != nil {
			figs = append(figs,
				figure{"1 caller, one node slow: lock+unlock p50", ms(bs, 50), ms(os, 50), "ms"},
				figure{"1 caller, one node slow: lock+unlock p99", ms(bs, 99), ms(os, 99), "ms"},
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
			figure{n + "lock+unlock/s", b.PerSec, r.PerSec, "/s"},
			figure{n + "lock+unlock p50", ms(b, 50), ms(&r, 50), "ms"},
			figure{n + "lock+unlock p99", ms(b, 99), ms(&r, 99), "ms"},
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
		if strings.HasSuffix(r.Scenario, "-procs") {
			n = fmt.Sprintf("hot key, %d separate processes: ", r.Callers)
		}
		figs = append(figs,
			figure{n + "acquisitions/s", b.PerSec, r.PerSec, "/s"},
			figure{n + "wait p50", ms(b, 50), ms(&r, 50), "ms"},
			figure{n + "wait p99", ms(b, 99), ms(&r, 99), "ms"},
			figure{n + "gap p50 (Unlock called to next Lock returned)", float64(b.Gap.P50) / 1e6, float64(r.Gap.P50) / 1e6, "ms"},
			figure{n + "gap mean", float64(b.Gap.Mean) / 1e6, float64(r.Gap.Mean) / 1e6, "ms"},
			figure{n + "hold mean (Lock returned to Unlock called; 1 ms asked)", float64(b.Hold.Mean) / 1e6, float64(r.Hold.Mean) / 1e6, "ms"},
			figure{n + "smallest share / largest", b.ShareRatio(), r.ShareRatio(), "ratio"},
			figure{n + "failed Lock calls", float64(b.Errors), float64(r.Errors), ""},
			figure{n + "overlapping holds", float64(b.Overlaps), float64(r.Overlaps), ""},
		)
	}
	for _, r := range results {
		if r.Impl != ourName || !strings.HasPrefix(r.Scenario, "shared-") {
			continue
		}
		b := get(baseName, r.Scenario)
		n := strings.TrimSuffix(r.Title, " (wait)") + ": "
		figs = append(figs,
			figure{n + "acquisitions/s", b.PerSec, r.PerSec, "/s"},
			figure{n + "wait p50", ms(b, 50), ms(&r, 50), "ms"},
			figure{n + "wait p99", ms(b, 99), ms(&r, 99), "ms"},
			figure{n + "failed Lock calls", float64(b.Errors), float64(r.Errors), ""},
		)
	}
	figs = append(figs, nodeCPUFigures(results, baseName, ourName, get)...)
	fmt.Fprintf(w, "| figure | %s | %s | ratio |\n|---|---:|---:|---:|\n", baseName, ourName)
	for _, f := range figs {
		ratio := "-"
		if f.base != 0 {
			ratio = fmt.Sprintf("%.2f", f.our/f.base)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", f.name, num(f.base, f.unit), num(f.our, f.unit), ratio)
	}
}

// nodeCPUFigures returns, for each scenario that both implementations ran
// with the nodes' CPU time measured, the node CPU per operation; its name
// says when either figure is coarse (from few clock ticks).
func nodeCPUFigures(results []loadtest.Result, baseName, ourName string, get func(impl, id string) *loadtest.Result) []figure {
	var figs []figure
	for _, r := range results {
		b := get(baseName, r.Scenario)
		if r.Impl != ourName || b == nil || r.NodeCPU == nil || b.NodeCPU == nil {
			continue
		}
		name := r.Title + ": node CPU per operation"
		if b.NodeCPU.Coarse() || r.NodeCPU.Coarse() {
			name += fmt.Sprintf(" (coarse: %d and %d ticks of 10 ms)", b.NodeCPU.Ticks, r.NodeCPU.Ticks)
		}
		figs = append(figs, figure{name, b.NodeCPU.PerOp, r.NodeCPU.PerOp, "µs"})
	}
	return figs
}

func num(v float64, unit string) string {
	switch unit {
	case "ms":
		return fmt.Sprintf("%.3g ms", v)
	case "µs":
		return fmt.Sprintf("%.0f µs", v)
	case "/s":
		return fmt.Sprintf("%.0f/s", v)
	case "B":
		return fmt.Sprintf("%.0f B", v)
	case "ratio":
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.0f", v)
}
