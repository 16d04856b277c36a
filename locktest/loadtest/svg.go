package loadtest

import (
	"fmt"
	"html"
	"math"
	"slices"
	"strings"
	"time"
)

var palette = []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd"}

// WriteSVG writes a plot to path with one panel per scenario. A panel shows
// each implementation's latency (wait, for a hot key) by percentile. Its
// time axis is logarithmic, with the tail (p90 to p99.9) stretched. A result
// with a [QuorumLatency] adds a panel below them. It shows each node's
// latency (p50 to p99) and share of the rounds it decided. Beside them are
// the quorum-th fastest node's latency and the round's own.
func WriteSVG(path, title string, results []Result) error {
	var scenarios []string
	byScenario := map[string][]Result{}
	var impls []string
	for _, r := range results {
		if _, ok := byScenario[r.Scenario]; !ok {
			scenarios = append(scenarios, r.Scenario)
		}
		byScenario[r.Scenario] = append(byScenario[r.Scenario], r)
		if !slices.Contains(impls, r.Impl) {
			impls = append(impls, r.Impl)
		}
	}
	const (
		width, left, right = 760, 60, 20
		panelH, plotH, top = 210, 150, 50
	)
	height := top + panelH*len(scenarios) + 10
	for _, r := range results {
		if r.Quorum != nil {
			height += quorumPanelHeight(r.Quorum)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	for i, name := range impls {
		x := left + i*170 // room for names like redquorum-user-backoff
		fmt.Fprintf(&b, `<line x1="%d" y1="34" x2="%d" y2="34" stroke="%s" stroke-width="2"/><text x="%d" y="38">%s</text>`+"\n", x, x+20, palette[i%len(palette)], x+25, html.EscapeString(name))
	}
	for si, id := range scenarios {
		rs := byScenario[id]
		y0 := top + si*panelH + 20 // top of the plot area
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, r := range rs {
			if len(r.samples) > 0 {
				lo = math.Min(lo, float64(r.samples[0]))
				hi = math.Max(hi, float64(r.samples[len(r.samples)-1]))
			}
		}
		if math.IsInf(lo, 0) {
			continue
		}
		pw := float64(width - left - right)
		ax := newLogAxis(lo, hi, left, pw)
		// The y axis stretches the tail: p0 at the bottom, then a tenth of
		// the height per "nine" (p90, p99) up to p99.9 at the top.
		yOf := func(q float64) float64 {
			nines := math.Min(-math.Log10(math.Max(1-q, 1e-3)), 3)
			return float64(y0) + plotH - nines/3*plotH
		}
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", left, y0-6, html.EscapeString(rs[0].Title))
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.0f" height="%d" fill="none" stroke="#999"/>`+"\n", left, y0, pw, plotH)
		ax.grid(&b, y0, plotH)
		for _, q := range []float64{0, 0.5, 0.9, 0.99, 0.999} {
			y := yOf(q)
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">p%g</text>`+"\n",
				left, y, float64(left)+pw, y, left-4, y+4, q*100)
		}
		for _, r := range rs {
			if len(r.samples) == 0 {
				continue
			}
			var pts strings.Builder
			n := len(r.samples)
			step := max(1, n/400)
			for k := 0; k < n; k += step {
				fmt.Fprintf(&pts, "%.1f,%.1f ", ax.x(float64(r.samples[k])), yOf(float64(k+1)/float64(n)))
			}
			fmt.Fprintf(&pts, "%.1f,%.1f", ax.x(float64(r.samples[n-1])), yOf(1))
			c := palette[slices.Index(impls, r.Impl)%len(palette)]
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`+"\n", c, pts.String())
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle" fill="#555">latency (log scale); y: percentile (the tail stretched)</text>`+"\n", float64(left)+pw/2, y0+plotH+28)
	}
	y := top + panelH*len(scenarios) + 10
	for _, r := range results {
		if r.Quorum != nil {
			writeQuorumPanel(&b, y, width, r)
			y += quorumPanelHeight(r.Quorum)
		}
	}
	b.WriteString("</svg>\n")
	return writeFile(path, []byte(b.String()))
}

// The quorum panel's layout: a row per node, then the quorum-th fastest
// node's and the round's, under a title and over the axis.
const (
	quorumRowH  = 18
	quorumHead  = 30
	quorumFoot  = 44
	quorumLabel = 170 // the rows' names
	quorumShare = 90  // the decided share, right of the plot
)

func quorumPanelHeight(q *QuorumLatency) int {
	return quorumHead + quorumRowH*(len(q.Nodes)+2) + quorumFoot
}

// writeQuorumPanel draws r.Quorum at y. Each row has a bar from p50 to p99
// on a logarithmic axis, a dot at p50 and a tick at p90. On the right is the
// share of the rounds the node decided.
func writeQuorumPanel(b *strings.Builder, y, width int, r Result) {
	q := r.Quorum
	type row struct {
		name    string
		d       Dist
		decided string
		color   string
	}
	var rows []row
	for _, n := range q.Nodes {
		rows = append(rows, row{n.Node, n.Latency, fmt.Sprintf("decided %.0f%%", 100*n.Decided), "#1f77b4"})
	}
	rows = append(rows,
		row{fmt.Sprintf("quorum-th fastest (%d)", q.Quorum), q.Kth, "", "#2ca02c"},
		row{fmt.Sprintf("round (%d rounds)", q.Rounds), q.Round, "", "#d62728"})
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, w := range rows {
		if w.d.P50 > 0 {
			lo = math.Min(lo, float64(w.d.P50))
		}
		hi = math.Max(hi, float64(w.d.P99))
	}
	if math.IsInf(lo, 0) || hi <= 0 {
		return
	}
	x0, pw := float64(quorumLabel), float64(width-quorumLabel-quorumShare)
	ax := newLogAxis(lo, hi, x0, pw)
	xOf := func(d time.Duration) float64 { return ax.x(float64(d)) }
	y0 := y + quorumHead
	plotH := quorumRowH * len(rows)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-weight="bold">%s</text>`+"\n", 60, y0-10,
		html.EscapeString(fmt.Sprintf("%s, %s: latency by node", r.Impl, r.Title)))
	fmt.Fprintf(b, `<rect x="%.0f" y="%d" width="%.0f" height="%d" fill="none" stroke="#999"/>`+"\n", x0, y0, pw, plotH)
	ax.grid(b, y0, plotH)
	for i, w := range rows {
		cy := float64(y0 + i*quorumRowH + quorumRowH/2)
		fmt.Fprintf(b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`+"\n", x0-6, cy+4, html.EscapeString(w.name))
		if w.d.P99 == 0 { // it never answered before a round was decided
			fmt.Fprintf(b, `<text x="%.0f" y="%.1f" fill="#555">no answer before the rounds were decided</text>`+"\n", x0+6, cy+4)
			continue
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="4" stroke-opacity="0.35"/>`+"\n", xOf(w.d.P50), cy, xOf(w.d.P99), cy, w.color)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1.5"/>`+"\n", xOf(w.d.P90), cy-5, xOf(w.d.P90), cy+5, w.color)
		fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>p50 %s, p90 %s, p99 %s</title></circle>`+"\n",
			xOf(w.d.P50), cy, w.color, Ms(w.d.P50), Ms(w.d.P90), Ms(w.d.P99))
		if w.decided != "" {
			fmt.Fprintf(b, `<text x="%.0f" y="%.1f">%s</text>`+"\n", x0+pw+6, cy+4, w.decided)
		}
	}
	fmt.Fprintf(b, `<text x="%.0f" y="%d" text-anchor="middle" fill="#555">latency (log scale): dot p50, tick p90, bar to p99</text>`+"\n", x0+pw/2, y0+plotH+28)
}

// logAxis places durations on a logarithmic x axis of whole decades, from
// x0 over width w.
type logAxis struct{ dlo, dhi, x0, w float64 }

// newLogAxis returns the axis whose decades cover lo to hi nanoseconds.
func newLogAxis(lo, hi, x0, w float64) logAxis {
	dlo, dhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dhi <= dlo {
		dhi = dlo + 1
	}
	return logAxis{dlo, dhi, x0, w}
}

// x returns the position of ns nanoseconds (at least 1).
func (a logAxis) x(ns float64) float64 {
	return a.x0 + (math.Log10(math.Max(ns, 1))-a.dlo)/(a.dhi-a.dlo)*a.w
}

// grid draws a line and a label at each decade, over a plot h high from y0.
func (a logAxis) grid(b *strings.Builder, y0, h int) {
	for d := a.dlo; d <= a.dhi; d++ {
		x := a.x(math.Pow(10, d))
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n",
			x, y0, x, y0+h, x, y0+h+14, time.Duration(math.Pow(10, d)))
	}
}
