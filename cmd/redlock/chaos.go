package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/redquorum/redquorum/internal/testkit/faultproxy"
	"github.com/redquorum/redquorum/locktest"
	"github.com/redquorum/redquorum/redlock"
)

// chaosNodes is the number of lock nodes of a chaos session.
const chaosNodes = 5

const chaosAbout = `Runs a short chaos session: contenders lock a few keys on five nodes while a
random fault schedule hits a minority of them, then the history of holds is
checked for two holders at once and for fencing tokens that go backwards.
Prints the checker's summary and writes a timeline (SVG) of holds, faults
and violations. Native nodes are redis-server processes (kill, pause,
partition, latency; with --replicas, failovers that lose the newest
writes); embedded nodes are in-process (kill, partition, latency). --control gives half the contenders a Client over nodes 0-2 and
the other half one over nodes 2-4, a quorum of 2 of 5: the checker must
report violations, and the command fails if it does not.

`

// chaos runs the chaos command.
func chaos(ctx context.Context, args []string, out io.Writer) error {
	fs := newFlags("chaos", "[--backend native|embedded] [--replicas] [--duration D] [--ttl D] [--node-timeout D] [--fencing] [--control] [--svg FILE]", out)
	fs.about = chaosAbout
	backend := fs.String("backend", "", "native (redis-server processes) or embedded; default native when redis-server is on PATH")
	duration := fs.Duration("duration", 5*time.Second, "how long the contenders run")
	ttl := fs.Duration("ttl", 500*time.Millisecond, "lock TTL")
	nodeTimeout := fs.Duration("node-timeout", 100*time.Millisecond, "redlock Options.NodeTimeout")
	guard := fs.Duration("restart-guard", 0, "redlock Options.RestartGuard (default twice the TTL)")
	fencing := fs.Bool("fencing", false, "redlock Options.Fencing: each lock carries a fencing token")
	workers := fs.Int("workers", 4, "contenders")
	keys := fs.Int("keys", 2, "keys the contenders share")
	seed := fs.Uint64("seed", 0, "the fault schedule's seed (default random; printed)")
	control := fs.Bool("control", false, "the minority-quorum control: violations are expected")
	replicas := fs.Bool("replicas", false, "native nodes only: give each node a replica and add failovers that lose the newest writes")
	svg := fs.String("svg", "", "where to write the timeline (default a new file in the temporary directory)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if err := chaosCheckFlags(*duration, *ttl, *nodeTimeout, *guard, *workers, *keys); err != nil {
		return err
	}
	if *backend == "" {
		*backend = "native"
		if _, err := exec.LookPath("redis-server"); err != nil && !*replicas {
			*backend = "embedded"
		}
	}
	targets, addrs, kinds, stop, err := chaosStart(ctx, *backend, *replicas)
	if err != nil {
		return err
	}
	defer stop()
	opts := redlock.Options{NodeTimeout: *nodeTimeout, Fencing: *fencing, RestartGuard: *guard}
	if opts.RestartGuard == 0 {
		opts.RestartGuard = 2 * *ttl
	}
	lists := [][]string{addrs}
	if *control {
		lists = [][]string{addrs[:3], addrs[2:]}
	}
	s := &chaosSession{ttl: *ttl, keys: *keys}
	if err := s.dial(ctx, lists, &opts); err != nil {
		return err
	}
	defer s.close()
	sched := locktest.Schedule{Seed: *seed, Kinds: kinds, KillDowntime: *ttl + 500*time.Millisecond, MaxLatency: *nodeTimeout * 3 / 4}
	c := sched.Run(ctx, targets...)
	fmt.Fprintf(out, "chaos: %d %s nodes, %d contenders, ttl %v, node timeout %v, fencing %v, fault schedule seed %d\n",
		chaosNodes, *backend, *workers, *ttl, *nodeTimeout, *fencing, c.Seed())
	s.run(ctx, *workers, time.Now().Add(*duration))
	faults := c.Stop()
	report := locktest.Check(s.rec.History(), faults)
	fmt.Fprintln(out, "chaos:", report)
	for _, f := range faults {
		if f.Err != "" {
			fmt.Fprintln(out, "chaos: fault:", f.Err)
		}
	}
	path, err := chaosTimeline(report, *svg)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "chaos: timeline:", path)
	switch {
	case *control && report.OK():
		return errors.New("the minority-quorum control ran without a violation: the checker saw nothing it should have")
	case *control:
		fmt.Fprintln(out, "chaos: the control's violations were reported, as they must be")
	case !report.OK():
		return fmt.Errorf("violations: %d overlapping holds, %d fence regressions (timeline %s)", len(report.Overlaps), len(report.Fences), path)
	}
	return nil
}

func chaosCheckFlags(duration, ttl, nodeTimeout, guard time.Duration, workers, keys int) error {
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"duration", duration}, {"ttl", ttl}, {"node-timeout", nodeTimeout}} {
		if f.v <= 0 {
			return usagef("--%s %v: must be positive", f.name, f.v)
		}
	}
	if guard < 0 {
		return usagef("--restart-guard %v: must not be negative", guard)
	}
	if workers < 1 || keys < 1 {
		return usagef("--workers %d, --keys %d: each must be at least 1", workers, keys)
	}
	return nil
}

// chaosStart starts the lock nodes of backend. It returns them as schedule
// targets, with their addresses, the kinds of fault they support, and how
// to stop them.
func chaosStart(ctx context.Context, backend string, replicas bool) ([]locktest.Target, []string, []locktest.FaultKind, func(), error) {
	if replicas && backend != "native" {
		return nil, nil, nil, nil, usagef("--replicas needs --backend native, not %q", backend)
	}
	switch backend {
	case "native":
		var opts []locktest.Option
		kinds := []locktest.FaultKind{locktest.Kill, locktest.Pause, locktest.Partition, locktest.Latency}
		if replicas {
			opts, kinds = append(opts, locktest.WithReplicas()), append(kinds, locktest.Failover)
		}
		c, err := locktest.New(ctx, chaosNodes, opts...)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		return c.Targets(), c.Addrs(), kinds, c.Close, nil
	case "embedded":
		srvs, _, err := embedded(chaosNodes)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		var nodes []*memNode
		stop := func() {
			for _, n := range nodes {
				n.proxy.Close()
			}
			stopAll(srvs)
		}
		var targets []locktest.Target
		var addrs []string
		for i, m := range srvs {
			p, err := faultproxy.NewProxy(m.Addr())
			if err != nil {
				stop()
				return nil, nil, nil, nil, err
			}
			n := &memNode{name: fmt.Sprintf("node%d", i), m: m, proxy: p}
			nodes, targets, addrs = append(nodes, n), append(targets, n), append(addrs, p.Addr())
		}
		return targets, addrs, []locktest.FaultKind{locktest.Kill, locktest.Partition, locktest.Latency}, stop, nil
	}
	return nil, nil, nil, nil, usagef("--backend %q: want native or embedded", backend)
}

// chaosTimeline writes the report's timeline to path, or to a new file in
// the temporary directory, and returns where.
func chaosTimeline(r *locktest.Report, path string) (string, error) {
	if path == "" {
		f, err := os.CreateTemp("", "redlock-chaos-*.svg")
		if err != nil {
			return "", err
		}
		path = f.Name()
		f.Close()
	}
	return path, r.WriteTimeline(path)
}

// chaosSession is the contenders of a session and what they recorded.
type chaosSession struct {
	ttl     time.Duration
	keys    int
	clients []*redlock.Client
	rec     locktest.Recorder
}

// dial makes one Client per node list. On failure it closes those made.
func (s *chaosSession) dial(ctx context.Context, lists [][]string, opts *redlock.Options) error {
	for _, list := range lists {
		c, err := redlock.New(redlock.NewNodes(list...), opts)
		if err != nil {
			s.close()
			return err
		}
		s.clients = append(s.clients, c)
		// A first lock before the faults: the Client finds the nodes'
		// deployment state (the control's second Client finds two nodes
		// new to it and waits out their restart guard).
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		l, err := c.Lock(lctx, "redlock-chaos:warm-up", s.ttl)
		cancel()
		if err != nil {
			s.close()
			return err
		}
		_ = l.Unlock(ctx)
	}
	return nil
}

func (s *chaosSession) close() {
	for _, c := range s.clients {
		c.Close()
	}
}

// run runs workers contenders, spread over the Clients, until deadline.
func (s *chaosSession) run(ctx context.Context, workers int, deadline time.Time) {
	var wg sync.WaitGroup
	for w := range workers {
		c := s.clients[w%len(s.clients)]
		wg.Go(func() {
			for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				key := fmt.Sprintf("redlock-chaos:%d", (w+i)%s.keys)
				span := s.rec.Start(w, key)
				lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				l, err := c.Lock(lctx, key, s.ttl)
				cancel()
				if err != nil {
					span.Failed()
					continue
				}
				span.Obtained(l.Fence())
				time.Sleep(time.Millisecond) // the critical section's work
				span.End(l.Until())
				_ = l.Unlock(ctx)
			}
		})
	}
	wg.Wait()
}

// memNode is an embedded (in-process) node behind a fault proxy. A kill
// closes the server, and a start brings it back empty.
type memNode struct {
	name  string
	m     *miniredis.Miniredis
	proxy *faultproxy.Proxy
}

func (n *memNode) Name() string { return n.name }

func (n *memNode) Kill(context.Context) error {
	n.m.Close()
	n.proxy.Cut()
	return nil
}

func (n *memNode) Start(context.Context) error {
	n.m.Close() // a no-op when down
	if err := n.m.Restart(); err != nil {
		return err
	}
	n.m.FlushAll() // a crash without persistence
	return nil
}

func (n *memNode) Pause() error               { return errors.New("an embedded node cannot be paused") }
func (n *memNode) Unpause() error             { return nil }
func (n *memNode) Partition()                 { n.proxy.Partition() }
func (n *memNode) Heal()                      { n.proxy.Heal() }
func (n *memNode) SetLatency(d time.Duration) { n.proxy.SetLatency(d, d) }
func (n *memNode) Failover(context.Context, time.Duration) error {
	return locktest.ErrNoReplica
}
