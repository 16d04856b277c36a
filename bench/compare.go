package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/redquorum/redquorum/locktest/loadtest"
)

// figure is one number compared between two implementations.
type figure struct {
	name      string
	base, our float64
	unit      string // "ms", "µs", "/s", "B", "" (count) or "ratio"
	// baseCoarse and ourCoarse mark node CPU figures from few clock ticks.
	baseCoarse, ourCoarse bool
}

// compare prints a Markdown table: each figure for base, then for each of
// ours its value and its ratio to base's. A figure that an implementation
// lacks (a scenario it did not run) shows as "-".
func compare(w io.Writer, results []loadtest.Result, baseName string, ours ...string) {
	var names []string // in the order of their first appearance
	rows := map[string][]*figure{}
	for k, our := range ours {
		for _, f := range figures(results, baseName, our) {
			if rows[f.name] == nil {
				names = append(names, f.name)
				rows[f.name] = make([]*figure, len(ours))
			}
			rows[f.name][k] = &f
		}
	}
	fmt.Fprintf(w, "| figure | %s |", baseName)
	for _, our := range ours {
		fmt.Fprintf(w, " %s | ratio |", our)
	}
	fmt.Fprintf(w, "\n|---|---:|%s\n", strings.Repeat("---:|---:|", len(ours)))
	coarse := false
	for _, name := range names {
		row := rows[name]
		i := slices.IndexFunc(row, func(f *figure) bool { return f != nil })
		fmt.Fprintf(w, "| %s | %s |", name, num(row[i].base, row[i].unit, row[i].baseCoarse))
		for _, f := range row {
			if f == nil {
				fmt.Fprint(w, " - | - |")
				continue
			}
			ratio := "-"
			if f.base != 0 {
				ratio = fmt.Sprintf("%.2f", f.our/f.base)
			}
			fmt.Fprintf(w, " %s | %s |", num(f.our, f.unit, f.ourCoarse), ratio)
			coarse = coarse || f.baseCoarse || f.ourCoarse
		}
		fmt.Fprintln(w)
	}
	if coarse {
		fmt.Fprintf(w, "\n~: node CPU from fewer than %d clock ticks of 10 ms, coarse: run longer.\n", loadtest.CoarseTicks)
	}
}

// figures returns each figure of our and of baseName in the scenarios both
// ran.
func figures(results []loadtest.Result, baseName, our string) []figure {
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
	if b, o := get(baseName, "distinct-1"), get(our, "distinct-1"); b != nil && o != nil {
		figs = append(figs,
			figure{name: "1 caller: lock+unlock p50", base: ms(b, 50), our: ms(o, 50), unit: "ms"},
			figure{name: "1 caller: lock+unlock p99", base: ms(b, 99), our: ms(o, 99), unit: "ms"},
			figure{name: "1 caller: lock+unlock p99.9", base: ms(b, 99.9), our: ms(o, 99.9), unit: "ms"},
			figure{name: "1 caller: allocations per lock+unlock", base: b.AllocsPerOp, our: o.AllocsPerOp},
			figure{name: "1 caller: bytes allocated per lock+unlock", base: b.BytesPerOp, our: o.BytesPerOp, unit: "B"},
		)
	}
	if b, o := get(baseName, "slow-1"), get(our, "slow-1"); b != nil && o != nil {
		figs = append(figs,
			figure{name: "1 caller, one node slow: lock+unlock p50", base: ms(b, 50), our: ms(o, 50), unit: "ms"},
			figure{name: "1 caller, one node slow: lock+unlock p99", base: ms(b, 99), our: ms(o, 99), unit: "ms"},
		)
	}
	for _, r := range results {
		b := get(baseName, r.Scenario)
		if r.Impl != our || b == nil {
			continue
		}
		figs = append(figs, scenarioFigures(b, &r, ms)...)
	}
	for _, r := range results {
		b := get(baseName, r.Scenario)
		if r.Impl != our || b == nil || r.NodeCPU == nil || b.NodeCPU == nil {
			continue
		}
		figs = append(figs, figure{name: r.Title + ": node CPU per operation", base: b.NodeCPU.PerOp, our: r.NodeCPU.PerOp,
			unit: "µs", baseCoarse: b.NodeCPU.Coarse(), ourCoarse: r.NodeCPU.Coarse()})
		if r.ClientCPU != nil && b.ClientCPU != nil {
			figs = append(figs, figure{name: r.Title + ": client CPU per operation", base: b.ClientCPU.PerOp, our: r.ClientCPU.PerOp,
				unit: "µs", baseCoarse: b.ClientCPU.Coarse(), ourCoarse: r.ClientCPU.Coarse()})
		}
	}
	return figs
}

// scenarioFigures returns the figures of the multi-caller scenario of b
// and r (nothing for the 1-caller ones).
func scenarioFigures(b, r *loadtest.Result, ms func(*loadtest.Result, float64) float64) []figure {
	switch {
	case strings.HasPrefix(r.Scenario, "distinct-") && r.Callers > 1:
		n := fmt.Sprintf("%d callers, distinct keys: ", r.Callers)
		return []figure{
			{name: n + "lock+unlock/s", base: b.PerSec, our: r.PerSec, unit: "/s"},
			{name: n + "lock+unlock p50", base: ms(b, 50), our: ms(r, 50), unit: "ms"},
			{name: n + "lock+unlock p99", base: ms(b, 99), our: ms(r, 99), unit: "ms"},
		}
	case strings.HasPrefix(r.Scenario, "hotkey-"):
		n := fmt.Sprintf("hot key, %d contenders: ", r.Callers)
		if strings.HasSuffix(r.Scenario, "-clients") {
			n = fmt.Sprintf("hot key, %d separate clients: ", r.Callers)
		}
		if strings.HasSuffix(r.Scenario, "-procs") {
			n = fmt.Sprintf("hot key, %d separate processes: ", r.Callers)
		}
		if strings.HasSuffix(r.Scenario, "-down") {
			n = fmt.Sprintf("hot key, %d separate clients, a node cut off: ", r.Callers)
			return []figure{
				{name: n + "acquisitions/s", base: b.PerSec, our: r.PerSec, unit: "/s"},
				{name: n + "wait p99", base: ms(b, 99), our: ms(r, 99), unit: "ms"},
				{name: n + "wait p99.9", base: ms(b, 99.9), our: ms(r, 99.9), unit: "ms"},
				{name: n + "wait max", base: float64(b.Latency.Max) / 1e6, our: float64(r.Latency.Max) / 1e6, unit: "ms"},
				{name: n + "failed Lock calls", base: float64(b.Errors), our: float64(r.Errors)},
				{name: n + "overlapping holds", base: float64(b.Overlaps), our: float64(r.Overlaps)},
			}
		}
		return []figure{
			{name: n + "acquisitions/s", base: b.PerSec, our: r.PerSec, unit: "/s"},
			{name: n + "wait p50", base: ms(b, 50), our: ms(r, 50), unit: "ms"},
			{name: n + "wait p99", base: ms(b, 99), our: ms(r, 99), unit: "ms"},
			{name: n + "gap p50 (Unlock called to next Lock returned)", base: float64(b.Gap.P50) / 1e6, our: float64(r.Gap.P50) / 1e6, unit: "ms"},
			{name: n + "gap mean", base: float64(b.Gap.Mean) / 1e6, our: float64(r.Gap.Mean) / 1e6, unit: "ms"},
			{name: n + "hold mean (Lock returned to Unlock called; 1 ms asked)", base: float64(b.Hold.Mean) / 1e6, our: float64(r.Hold.Mean) / 1e6, unit: "ms"},
			{name: n + "smallest share / largest", base: b.ShareRatio(), our: r.ShareRatio(), unit: "ratio"},
			{name: n + "failed Lock calls", base: float64(b.Errors), our: float64(r.Errors)},
			{name: n + "overlapping holds", base: float64(b.Overlaps), our: float64(r.Overlaps)},
		}
	case strings.HasPrefix(r.Scenario, "shared-"):
		n := strings.TrimSuffix(r.Title, " (wait)") + ": "
		return []figure{
			{name: n + "acquisitions/s", base: b.PerSec, our: r.PerSec, unit: "/s"},
			{name: n + "wait p50", base: ms(b, 50), our: ms(r, 50), unit: "ms"},
			{name: n + "wait p99", base: ms(b, 99), our: ms(r, 99), unit: "ms"},
			{name: n + "failed Lock calls", base: float64(b.Errors), our: float64(r.Errors)},
		}
	}
	return nil
}

// num formats v in unit, with a "~" in front when it is coarse.
func num(v float64, unit string, coarse bool) string {
	s := fmt.Sprintf("%.0f", v)
	switch unit {
	case "ms":
		s = fmt.Sprintf("%.3g ms", v)
	case "µs":
		s = fmt.Sprintf("%.0f µs", v)
	case "/s":
		s = fmt.Sprintf("%.0f/s", v)
	case "B":
		s = fmt.Sprintf("%.0f B", v)
	case "ratio":
		s = fmt.Sprintf("%.2f", v)
	}
	if coarse {
		s = "~" + s
	}
	return s
}
