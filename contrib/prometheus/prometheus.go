// Package redlockprom exports what a [redlock.Client] does as Prometheus
// metrics. It is a module of its own, so that the redquorum module does not
// depend on the Prometheus client.
//
//	metrics := redlockprom.New(nil)
//	prometheus.MustRegister(metrics)
//	client, err := redlock.Open(addrs, &redlock.Options{Observer: metrics.Observer()})
//
// The metrics, all named redquorum_*, and their labels:
//
//   - redquorum_operations_total{op, outcome}: a counter of the operations
//     of [redlock.Event], by [redlock.Op] and [redlock.Outcome].
//   - redquorum_lock_wait_seconds{op, outcome}: a histogram of how long
//     Lock, TryLock, LockMany and TryLockMany took to obtain the lock or
//     give up, rounds and waits included.
//   - redquorum_lock_hold_seconds: a histogram of how long locks were held,
//     from the start of the round that obtained them to their Unlock.
//   - redquorum_node_latency_seconds{node, request}: a histogram of each
//     node's answer time in rounds, by request (acquire, extend, release);
//     requests that failed or got no answer are not observed.
//   - redquorum_locks_held: a gauge of the locks obtained and not yet
//     unlocked through the observed Clients (a lock left to expire stays
//     counted).
//   - redquorum_node_guarded{node} and redquorum_node_unreachable{node}:
//     how many of the observed Clients see the node in its restart guard,
//     or unreachable ([redlock.NodeChange]): 1 or 0 with one Client.
//     A brand-new deployment's first guards are not counted here.
//   - redquorum_node_established_total{node}: a counter of the nodes that
//     an observed Client's new-deployment shortcut established
//     ([redlock.Established]): up to one per Client for each node of a new
//     deployment.
//   - redquorum_do_extensions_total: a counter of the extensions that
//     [redlock.Client.Do] made. Its losses are
//     redquorum_operations_total{op="do", outcome="lost"}.
//
// Every label has a bounded set of values: node is a node's address, and
// the keys of the locks are left out unless Options.KeyLabel maps them to
// a bounded set.
package redlockprom

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redquorum/redquorum/redlock"
)

// DefaultBuckets are the bounds, in seconds, of the duration histograms:
// from a round trip on one host (100 µs) to a Lock that waits (30 s).
func DefaultBuckets() []float64 {
	return []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
}

// Options configures a [Collector]. A nil *Options means the defaults.
type Options struct {
	// KeyLabel, when set, adds the label "key" to
	// redquorum_operations_total, redquorum_lock_wait_seconds and
	// redquorum_lock_hold_seconds, with the value it returns for the
	// operation's first key. Every distinct value makes new time series:
	// return values from a small fixed set, for example the part of the
	// key before its first ":", or "other".
	KeyLabel func(key string) string
	// Buckets are the bounds of the duration histograms, in seconds. Nil
	// means DefaultBuckets().
	Buckets []float64
	// ConstLabels are added to every metric, for example to tell Clients
	// apart.
	ConstLabels prometheus.Labels
}

// Collector holds the metrics of one or more Clients. It is a
// [prometheus.Collector]: register it, and give [Collector.Observer] to
// each Client. It is safe for concurrent use.
type Collector struct {
	keyLabel   func(string) string
	ops        *prometheus.CounterVec
	wait       *prometheus.HistogramVec
	hold       *prometheus.HistogramVec
	latency    *prometheus.HistogramVec
	held       prometheus.Gauge
	guarded    *prometheus.GaugeVec
	unreach    *prometheus.GaugeVec
	est        *prometheus.CounterVec
	extensions prometheus.Counter
}

// New returns a Collector with no samples yet.
func New(opts *Options) *Collector {
	if opts == nil {
		opts = &Options{}
	}
	buckets := opts.Buckets
	if buckets == nil {
		buckets = DefaultBuckets()
	}
	opLabels, holdLabels := []string{"op", "outcome"}, []string(nil)
	if opts.KeyLabel != nil {
		opLabels, holdLabels = append(opLabels, "key"), []string{"key"}
	}
	cl := opts.ConstLabels
	hist := func(name, help string, labels []string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "redquorum", Name: name, Help: help, Buckets: buckets, ConstLabels: cl}, labels)
	}
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "redquorum", Name: name, Help: help, ConstLabels: cl}, []string{"node"})
	}
	return &Collector{
		keyLabel: opts.KeyLabel,
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "redquorum", Name: "operations_total",
			Help: "Lock, TryLock, LockMany, TryLockMany, Extend, Unlock and Do calls, by operation and outcome.", ConstLabels: cl}, opLabels),
		wait:    hist("lock_wait_seconds", "Time Lock, TryLock, LockMany and TryLockMany took to obtain the lock or give up.", opLabels),
		hold:    hist("lock_hold_seconds", "Time locks were held, from the round that obtained them to their Unlock.", holdLabels),
		latency: hist("node_latency_seconds", "Time each node took to answer a request of a round, by request: acquire, extend or release.", []string{"node", "request"}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "redquorum", Name: "locks_held",
			Help: "Locks obtained and not yet unlocked.", ConstLabels: cl}),
		guarded: gauge("node_guarded", "Observed clients that see the node in its restart guard."),
		unreach: gauge("node_unreachable", "Observed clients that see the node unreachable."),
		est: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "redquorum", Name: "node_established_total",
			Help: "Nodes of a brand-new deployment that an observed client established.", ConstLabels: cl}, []string{"node"}),
		extensions: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "redquorum", Name: "do_extensions_total",
			Help: "Extensions that Do made while its function ran.", ConstLabels: cl}),
	}
}

func (c *Collector) collectors() []prometheus.Collector {
	return []prometheus.Collector{c.ops, c.wait, c.hold, c.latency, c.held, c.guarded, c.unreach, c.est, c.extensions}
}

// Describe sends the descriptions of the metrics.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, m := range c.collectors() {
		m.Describe(ch)
	}
}

// Collect sends the metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.collectors() {
		m.Collect(ch)
	}
}

// Observer returns the hooks that feed the metrics, for
// redlock.Options.Observer. Several Clients may share them.
func (c *Collector) Observer() *redlock.Observer {
	return &redlock.Observer{End: c.end, Do: c.do, Node: c.node}
}

// request names the requests of an operation's rounds.
func request(op redlock.Op) string {
	switch op {
	case redlock.OpExtend:
		return "extend"
	case redlock.OpUnlock:
		return "release"
	}
	return "acquire"
}

func (c *Collector) end(_ context.Context, e redlock.Event) {
	labels := []string{string(e.Op), string(e.Outcome)}
	var key []string
	if c.keyLabel != nil && len(e.Keys) > 0 {
		key = []string{c.keyLabel(e.Keys[0])}
		labels = append(labels, key...)
	}
	c.ops.WithLabelValues(labels...).Inc()
	switch {
	case e.Op.Obtains():
		c.wait.WithLabelValues(labels...).Observe(e.Duration.Seconds())
		if e.Outcome == redlock.Obtained {
			c.held.Inc()
		}
	case e.Op == redlock.OpUnlock:
		if e.Ended {
			c.held.Dec()
			c.hold.WithLabelValues(key...).Observe(e.Held.Seconds())
		}
	}
	req := request(e.Op)
	for _, r := range e.Rounds {
		for _, v := range r.Nodes {
			if v.Outcome.Answered() {
				c.latency.WithLabelValues(v.Node, req).Observe(v.Latency.Seconds())
			}
		}
	}
}

func (c *Collector) do(_ context.Context, e redlock.DoEvent) {
	if e.Outcome == redlock.Extended {
		c.extensions.Inc()
	}
}

func (c *Collector) node(_ context.Context, e redlock.NodeEvent) {
	switch e.Change {
	case redlock.GuardEntered:
		c.guarded.WithLabelValues(e.Node).Inc()
	case redlock.GuardLeft:
		c.guarded.WithLabelValues(e.Node).Dec()
	case redlock.Unreachable:
		c.unreach.WithLabelValues(e.Node).Inc()
	case redlock.Reachable:
		c.unreach.WithLabelValues(e.Node).Dec()
	case redlock.Established:
		c.est.WithLabelValues(e.Node).Inc()
	}
}
