package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"

	"github.com/redquorum/redquorum/locktest/loadtest"
	"github.com/redquorum/redquorum/redlock"
)

// bench measures lock+unlock latency, throughput and hot-key contention.
func bench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("bench", "[--nodes NODE,...] [--duration D] [--callers N] [--slow-node D] [--json FILE] [--svg FILE] [--metrics ADDR]", stdout)
	nodesFlag := fs.String("nodes", "", nodesUsage+" to use instead of five in-process nodes")
	duration := fs.Duration("duration", 5*time.Second, "measured time per scenario")
	callers := fs.Int("callers", 8, "concurrent callers in the multi-caller and hot-key scenarios")
	slow := fs.Duration("slow-node", 0, "also measure with this much latency added each way in front of the first node")
	jsonFile := fs.String("json", "", "write the results as JSON to this file")
	svgFile := fs.String("svg", "", "write to this SVG file a latency distribution plot per scenario and each node's latency and share of the quorum")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	metricsAddr := fs.String("metrics", "", "serve the lock metrics in the Prometheus text format at http://ADDR/metrics while the bench runs (the names of contrib/prometheus)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usagef("unexpected argument %q", pos[0])
	case *duration <= 0:
		return usagef("--duration %v: must be positive", *duration)
	case *callers < 1:
		return usagef("--callers %d: must be at least 1", *callers)
	case *slow < 0:
		return usagef("--slow-node %v: must not be negative", *slow)
	}

	runner := &loadtest.Runner{Spawn: func(ctx context.Context) *exec.Cmd { return exec.CommandContext(ctx, os.Args[0]) }}
	if !*quiet {
		runner.Progress = stderr
	}
	var addrs, names []string
	where := ""
	opts := &redlock.Options{}
	if *nodesFlag == "" {
		srvs, a, err := embedded(embeddedNodes)
		if err != nil {
			return err
		}
		defer stopAll(srvs)
		addrs = a
		where = fmt.Sprintf("%d in-process nodes (miniredis: slow, and allocations not measured since the nodes run in this process; use --nodes for real figures)", len(addrs))
		opts.NodeTimeout = time.Second // Lua in an interpreter on the same cores as the callers
		runner.Settings = map[string]string{"node-timeout": opts.NodeTimeout.String()}
	} else {
		if addrs, names, err = parseNodes(*nodesFlag); err != nil {
			return err
		}
		nodes, err := dialNodes(ctx, addrs, names) // fail early, with one line, on an unreachable node
		if err != nil {
			return err
		}
		closeNodes(nodes)
		runner.MeasureAllocs = true
		where = fmt.Sprintf("%d nodes: %v", len(names), names)
	}
	if *metricsAddr != "" {
		m := newMetrics()
		addr, stop, err := serveMetrics(ctx, *metricsAddr, m)
		if err != nil {
			return err
		}
		defer stop()
		opts.Observer = m.observer()
		fmt.Fprintf(stderr, "metrics at http://%s/metrics\n", addr)
	}
	fmt.Fprintf(stdout, "redquorum bench on %s, %v per scenario\n", where, *duration)
	quorum := loadtest.NewQuorumRecorder(len(addrs)/2 + 1)
	opts.Observer = redlock.JoinObservers(opts.Observer, &redlock.Observer{End: quorum.End})
	var results []loadtest.Result
	impl := loadtest.Redquorum(opts)
	for _, sc := range loadtest.Scenarios(*duration, *callers, *slow) {
		quorum.Take()
		r, err := runner.Run(ctx, impl, sc, addrs)
		if err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.Quorum = quorum.Take() // nil for callers in processes of their own
		results = append(results, r)
	}
	if err := loadtest.WriteTable(stdout, results); err != nil {
		return err
	}
	if err := loadtest.WriteQuorumTable(stdout, results); err != nil {
		return err
	}
	if *jsonFile != "" {
		rep := loadtest.Report{Env: loadtest.Environment(), Command: "redlock bench", Results: results}
		if err := loadtest.WriteJSON(*jsonFile, rep); err != nil {
			return err
		}
	}
	if *svgFile != "" {
		title := fmt.Sprintf("redquorum lock latency, %d nodes", len(addrs))
		if *nodesFlag == "" {
			title += " in-process (miniredis)"
		}
		if err := loadtest.WriteSVG(*svgFile, title, results); err != nil {
			return err
		}
	}
	return nil
}

// benchWorker runs one caller of a bench scenario whose callers are
// processes of their own (see loadtest.Runner.Spawn).
func benchWorker(ctx context.Context, spec loadtest.WorkerSpec) error {
	opts := &redlock.Options{}
	if v := spec.Settings["node-timeout"]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return err
		}
		opts.NodeTimeout = d
	}
	return loadtest.RunWorker(ctx, loadtest.Redquorum(opts), spec)
}
