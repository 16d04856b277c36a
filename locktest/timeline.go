package locktest

import (
	"bufio"
	"cmp"
	"fmt"
	"hash/fnv"
	"html"
	"io"
	"os"
	"slices"
	"time"
)

// The geometry of a timeline, in SVG user units.
const (
	tlWidth  = 1600 // of the time axis
	tlLabel  = 140  // the labels left of it
	tlRow    = 18   // one client or node
	tlHeader = 40   // the title and the axis
)

// faultColors maps each kind of fault to its fill.
func faultColors() map[FaultKind]string {
	return map[FaultKind]string{
		Kill: "#444", Pause: "#8e44ad", Partition: "#e67e22", ClientPartition: "#f1c40f",
		Latency: "#3498db", Failover: "#16a085",
	}
}

// WriteTimeline writes r's timeline as an SVG picture to path. Each client
// has a row with a bar per hold, coloured by key, and failed attempts as
// grey ticks. Each node has a row with its faults, coloured by kind. Each
// violation is in red. An overlap is a red band over the time both holds
// overlap, with both holds outlined. A fence regression is a red outline of
// the later hold. A crowd is a red band over the time all its holds
// overlap, with each outlined.
func (r *Report) WriteTimeline(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	r.writeSVG(w)
	return cmp.Or(w.Flush(), f.Close())
}

// timeline is the picture's scale and rows.
type timeline struct {
	t0, t1  int64
	clients map[int]int // client → row
	nodes   map[string]int
}

func (tl *timeline) x(t int64) float64 {
	return tlLabel + float64(t-tl.t0)/float64(max(tl.t1-tl.t0, 1))*tlWidth
}

func (tl *timeline) y(row int) int { return tlHeader + row*tlRow }

func (r *Report) layout() *timeline {
	tl := &timeline{t0: 1<<63 - 1, t1: -1 << 63, clients: map[int]int{}, nodes: map[string]int{}}
	var clients []int
	for _, a := range r.History {
		tl.t0, tl.t1 = min(tl.t0, a.Call), max(tl.t1, a.Obtained, a.End)
		if _, ok := tl.clients[a.Client]; !ok {
			tl.clients[a.Client] = 0
			clients = append(clients, a.Client)
		}
	}
	slices.Sort(clients)
	for i, c := range clients {
		tl.clients[c] = i
	}
	var nodes []string
	for _, f := range r.Faults {
		tl.t0, tl.t1 = min(tl.t0, f.Start), max(tl.t1, f.End)
		if _, ok := tl.nodes[f.Name]; !ok {
			tl.nodes[f.Name] = 0
			nodes = append(nodes, f.Name)
		}
	}
	slices.Sort(nodes)
	for i, n := range nodes {
		tl.nodes[n] = len(clients) + 1 + i
	}
	if tl.t0 > tl.t1 {
		tl.t0, tl.t1 = 0, 1
	}
	return tl
}

func (r *Report) writeSVG(w io.Writer) {
	tl := r.layout()
	rows := len(tl.clients) + 1 + len(tl.nodes)
	height := tl.y(rows) + 40
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n",
		tlLabel+tlWidth+20, height)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(w, `<text x="4" y="16" font-size="13">%s</text>`+"\n", html.EscapeString(r.String()))
	span := time.Duration(tl.t1 - tl.t0)
	for i := range 11 { // the time axis, in tenths
		x := tlLabel + float64(i)*tlWidth/10
		fmt.Fprintf(w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="32">%v</text>`+"\n",
			x, tlHeader-4, x, height-30, x+2, (span * time.Duration(i) / 10).Round(time.Millisecond))
	}
	for c, row := range tl.clients {
		fmt.Fprintf(w, `<text x="4" y="%d">client %d</text>`+"\n", tl.y(row)+13, c)
	}
	for n, row := range tl.nodes {
		fmt.Fprintf(w, `<text x="4" y="%d">%s</text>`+"\n", tl.y(row)+13, html.EscapeString(n))
	}
	for _, a := range r.History {
		y := tl.y(tl.clients[a.Client])
		if !a.OK {
			fmt.Fprintf(w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#bbb"/>`+"\n", tl.x(a.Obtained), y+6, tl.x(a.Obtained), y+12)
			continue
		}
		bar(w, tl, y, a.Obtained, a.End, keyColor(a.Key), "", fmt.Sprintf("%s fence %d", a.Key, a.Fence))
	}
	colors := faultColors()
	for _, f := range r.Faults {
		end := cmp.Or(f.End, tl.t1)
		label := string(f.Kind)
		if f.Refused {
			label += " (refused)"
		}
		bar(w, tl, tl.y(tl.nodes[f.Name]), f.Start, end, colors[f.Kind], "", label)
	}
	r.writeViolations(w, tl, height)
	legend(w, height-12)
	fmt.Fprintln(w, `</svg>`)
}

// writeViolations draws the overlaps, fence regressions and crowds in red.
func (r *Report) writeViolations(w io.Writer, tl *timeline, height int) {
	for _, o := range r.Overlaps {
		band(w, tl, height, o.B.Obtained, min(o.A.End, o.B.End), o.String())
		for _, a := range []Attempt{o.A, o.B} {
			bar(w, tl, tl.y(tl.clients[a.Client]), a.Obtained, a.End, "none", "red", "overlap: "+o.String())
		}
	}
	for _, f := range r.Fences {
		bar(w, tl, tl.y(tl.clients[f.After.Client]), f.After.Obtained, f.After.End, "none", "red", f.String())
	}
	for _, c := range r.Crowds {
		from, to := c.Holds[len(c.Holds)-1].Obtained, c.Holds[0].End
		for _, a := range c.Holds {
			to = min(to, a.End)
		}
		band(w, tl, height, from, to, c.String())
		for _, a := range c.Holds {
			bar(w, tl, tl.y(tl.clients[a.Client]), a.Obtained, a.End, "none", "red", "crowd: "+c.String())
		}
	}
}

// band draws a violation from t0 to t1 as a red band across every row, with
// a tooltip.
func band(w io.Writer, tl *timeline, height int, t0, t1 int64, title string) {
	fmt.Fprintf(w, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="red" opacity="0.3"><title>%s</title></rect>`+"\n",
		tl.x(t0), tlHeader, max(tl.x(t1)-tl.x(t0), 2), height-30-tlHeader, html.EscapeString(title))
}

// bar draws one bar of a row from t0 to t1, with a tooltip.
func bar(w io.Writer, tl *timeline, y int, t0, t1 int64, fill, stroke, title string) {
	attr := ""
	if stroke != "" {
		attr = fmt.Sprintf(` stroke="%s" stroke-width="2"`, stroke)
	}
	fmt.Fprintf(w, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"%s><title>%s</title></rect>`+"\n",
		tl.x(t0), y+2, max(tl.x(t1)-tl.x(t0), 1), tlRow-4, fill, attr, html.EscapeString(title))
}

func legend(w io.Writer, y int) {
	x := 4
	colors := faultColors()
	for _, k := range ReplicatedFaults() {
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", x, y-9, colors[k], x+14, y, k)
		x += 120
	}
	fmt.Fprintf(w, `<rect x="%d" y="%d" width="10" height="10" fill="red" opacity="0.3"/><text x="%d" y="%d">violation</text>`+"\n", x, y-9, x+14, y)
}

// keyColor gives each key a stable colour.
func keyColor(key string) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return fmt.Sprintf("hsl(%d, 45%%, 60%%)", 80+h.Sum32()%120) // greens to blues: neither the red of a violation nor the purple of a pause
}
