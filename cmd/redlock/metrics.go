package main

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redquorum/redquorum/redlock"
)

// metrics turns a Client's Observer events into the metrics of
// contrib/prometheus, with the same names, labels and buckets. It serves
// them in the Prometheus text format, so this command needs no Prometheus
// library. The core module, which holds the command, must not depend on
// one. It is safe for concurrent use.
type metrics struct {
	mu         sync.Mutex
	ops        map[string]float64    // by label set, as written
	wait       map[string]*histogram // by label set
	hold       histogram             //
	latency    map[string]*histogram // by label set
	held       float64               //
	guarded    map[string]float64    // by node label
	unreach    map[string]float64    // by node label
	est        map[string]float64    // by node label
	extensions float64               //
}

// metricBuckets are contrib/prometheus's DefaultBuckets.
func metricBuckets() []float64 {
	return []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
}

// histogram counts observations per bucket (not cumulated), with their sum.
type histogram struct {
	counts []uint64 // per bucket of metricBuckets, then +Inf
	sum    float64
}

func (h *histogram) observe(v float64) {
	if h.counts == nil {
		h.counts = make([]uint64, len(metricBuckets())+1)
	}
	i, _ := slices.BinarySearch(metricBuckets(), v)
	h.counts[i]++
	h.sum += v
}

func newMetrics() *metrics {
	return &metrics{ops: map[string]float64{}, wait: map[string]*histogram{}, latency: map[string]*histogram{},
		guarded: map[string]float64{}, unreach: map[string]float64{}, est: map[string]float64{}}
}

// labels formats label pairs (name, value, name, value, ...) as {a="x",b="y"}.
func labels(pairs ...string) string {
	var b strings.Builder
	b.WriteByte('{')
	for i := 0; i < len(pairs); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(pairs[i] + `="`)
		escape(&b, pairs[i+1])
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// escape writes v to b as a label value of the text format. It escapes
// backslashes, double quotes and line feeds.
func escape(b *strings.Builder, v string) {
	for _, r := range v {
		switch r {
		case '\\', '"':
			b.WriteByte('\\')
			b.WriteRune(r)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(r)
		}
	}
}

// observer returns the hooks that feed m.
func (m *metrics) observer() *redlock.Observer {
	return &redlock.Observer{End: m.end, Do: m.do, Node: m.node}
}

func (m *metrics) end(_ context.Context, e redlock.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	set := labels("op", string(e.Op), "outcome", string(e.Outcome))
	m.ops[set]++
	req := "acquire"
	switch {
	case e.Op.Obtains():
		hist(m.wait, set).observe(e.Duration.Seconds())
		if e.Outcome == redlock.Obtained {
			m.held++
		}
	case e.Op == redlock.OpUnlock:
		req = "release"
		if e.Ended {
			m.held--
			m.hold.observe(e.Held.Seconds())
		}
	case e.Op == redlock.OpExtend:
		req = "extend"
	}
	for _, r := range e.Rounds {
		for _, v := range r.Nodes {
			if v.Outcome.Answered() {
				hist(m.latency, labels("node", v.Node, "request", req)).observe(v.Latency.Seconds())
			}
		}
	}
}

// hist returns the histogram of set in hs, made on first use.
func hist(hs map[string]*histogram, set string) *histogram {
	h := hs[set]
	if h == nil {
		h = &histogram{}
		hs[set] = h
	}
	return h
}

func (m *metrics) do(_ context.Context, e redlock.DoEvent) {
	if e.Outcome == redlock.Extended {
		m.mu.Lock()
		m.extensions++
		m.mu.Unlock()
	}
}

func (m *metrics) node(_ context.Context, e redlock.NodeEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	node := labels("node", e.Node)
	switch e.Change {
	case redlock.GuardEntered:
		m.guarded[node]++
	case redlock.GuardLeft:
		m.guarded[node]--
	case redlock.Unreachable:
		m.unreach[node]++
	case redlock.Reachable:
		m.unreach[node]--
	case redlock.Established:
		m.est[node]++
	}
}

// ServeHTTP writes the metrics in the Prometheus text format, version 0.0.4.
func (m *metrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	b := bufio.NewWriter(w)
	m.write(b)
	_ = b.Flush()
}

func (m *metrics) write(b *bufio.Writer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	family(b, "redquorum_operations_total", "counter", "Lock, TryLock, LockMany, TryLockMany, Extend, Unlock and Do calls, by operation and outcome.", m.ops)
	histograms(b, "redquorum_lock_wait_seconds", "Time Lock, TryLock, LockMany and TryLockMany took to obtain the lock or give up.", m.wait)
	histograms(b, "redquorum_lock_hold_seconds", "Time locks were held, from the round that obtained them to their Unlock.", map[string]*histogram{"": &m.hold})
	histograms(b, "redquorum_node_latency_seconds", "Time each node took to answer a request of a round, by request: acquire, extend or release.", m.latency)
	family(b, "redquorum_locks_held", "gauge", "Locks obtained and not yet unlocked.", map[string]float64{"": m.held})
	family(b, "redquorum_node_guarded", "gauge", "Observed clients that see the node in its restart guard.", m.guarded)
	family(b, "redquorum_node_unreachable", "gauge", "Observed clients that see the node unreachable.", m.unreach)
	family(b, "redquorum_node_established_total", "counter", "Nodes of a brand-new deployment that an observed client established.", m.est)
	family(b, "redquorum_do_extensions_total", "counter", "Extensions that Do made while its function ran.", map[string]float64{"": m.extensions})
}

// family writes one counter or gauge family, its samples sorted by labels.
func family(b *bufio.Writer, name, typ, help string, samples map[string]float64) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	for _, set := range slices.Sorted(maps.Keys(samples)) {
		fmt.Fprintf(b, "%s%s %s\n", name, set, number(samples[set]))
	}
}

// histograms writes one histogram family, its samples sorted by labels.
func histograms(b *bufio.Writer, name, help string, hs map[string]*histogram) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name)
	bounds := metricBuckets()
	for _, set := range slices.Sorted(maps.Keys(hs)) {
		h := hs[set]
		inner := strings.TrimSuffix(strings.TrimPrefix(set, "{"), "}")
		if inner != "" {
			inner += ","
		}
		var total uint64
		for i, bound := range append(bounds, math.Inf(1)) {
			if h.counts != nil {
				total += h.counts[i]
			}
			le := number(bound)
			fmt.Fprintf(b, "%s_bucket{%sle=%q} %d\n", name, inner, le, total)
		}
		fmt.Fprintf(b, "%s_sum%s %s\n%s_count%s %d\n", name, set, number(h.sum), name, set, total)
	}
}

// number formats v as the text format wants.
func number(v float64) string {
	if math.IsInf(v, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// serveMetrics serves m at http://addr/metrics until the function it
// returns stops the server and waits for it. It also returns the address it
// listens on, since addr may have port 0.
func serveMetrics(ctx context.Context, addr string, m *metrics) (string, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	stop := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}
	return ln.Addr().String(), stop, nil
}
