package jobrunner_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/examples/jobrunner"
	"github.com/redquorum/redquorum/locktest"
	"github.com/redquorum/redquorum/locktest/linearize"
	"github.com/redquorum/redquorum/redlock"
)

const (
	ttl     = time.Second
	margin  = ttl / 4 // the validity a worker wants left before it charges
	jobs    = 4
	workers = 3 // per Client
)

// session is one run of the job runner under faults, and what was
// recorded.
type session struct {
	report  *locktest.Report
	charges linearize.Recorder // each job's charges: an Incr of its counter
	holds   int
}

// exercise runs workers on clients, each over its own list of lock nodes,
// for d under a random fault schedule of kinds on nodes, and checks the
// holds.
func exercise(t *testing.T, nodes *locktest.Cluster, lists [][]string, kinds []locktest.FaultKind, d time.Duration) *session {
	ledgerNode := locktest.Start(t, 1) // the account, never faulted
	ledger := redis.NewClient(&redis.Options{Addr: ledgerNode.Addrs()[0], MaxRetries: -1})
	t.Cleanup(func() { ledger.Close() })

	var clients []*redlock.Client
	for _, list := range lists {
		// A restart guard of twice the TTL, not a minute, keeps a node
		// that comes back empty out only briefly.
		c, err := redlock.New(redlock.NewNodes(list...), &redlock.Options{NodeTimeout: 100 * time.Millisecond, RestartGuard: 2 * ttl})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		// One lock before the faults start: each Client first finds the
		// nodes' deployment state (the second Client of the control finds
		// two nodes new to the deployment and waits out their guard).
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		l, err := c.Lock(ctx, "warm-up", ttl)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		_ = l.Unlock(t.Context())
		clients = append(clients, c)
	}

	chaos := locktest.Schedule{Kinds: kinds}.Start(t, nodes.Targets()...)
	s := &session{}
	var rec locktest.Recorder
	var wg sync.WaitGroup
	var ledgerErrs []error
	var mu sync.Mutex
	deadline := time.Now().Add(d)
	for ci, c := range clients {
		for w := range workers {
			id := ci*100 + w
			wg.Go(func() {
				err := work(t.Context(), id, c, ledger, &rec, &s.charges, deadline)
				mu.Lock()
				defer mu.Unlock()
				ledgerErrs = append(ledgerErrs, err)
			})
		}
	}
	wg.Wait()
	if err := errors.Join(ledgerErrs...); err != nil {
		t.Fatalf("the ledger, which is never faulted, failed: %v", err)
	}
	s.report = locktest.Check(rec.History(), chaos.Stop())
	for _, a := range s.report.History {
		if a.OK {
			s.holds++
		}
	}
	t.Logf("fault schedule seed %d: %s", chaos.Seed(), s.report)
	return s
}

// work is one worker: it runs random jobs until deadline. A job charges
// one unit to the job's counter on the ledger, by reading it and writing
// it plus one: two workers running one job at once lose a charge.
func work(ctx context.Context, id int, c *redlock.Client, ledger *redis.Client,
	rec *locktest.Recorder, charges *linearize.Recorder, deadline time.Time) error {
	var span *locktest.Span
	var ledgerErr error
	r := &jobrunner.Runner{
		Locks: c, TTL: ttl,
		Work: func(ctx context.Context, job string, until time.Time) error {
			if time.Until(until) < margin {
				return nil
			}
			wctx, cancel := context.WithDeadline(ctx, until.Add(-margin/2))
			defer cancel()
			call := charges.Start(id, job)
			v, err := ledger.Get(wctx, "balance:"+job).Int64()
			if err != nil && !errors.Is(err, redis.Nil) {
				ledgerErr = err
				return err
			}
			time.Sleep(2 * time.Millisecond)
			if time.Until(until) < margin {
				return nil // a read alone changes nothing
			}
			if err := ledger.Set(wctx, "balance:"+job, v+1, 0).Err(); err != nil {
				ledgerErr = err
				return err
			}
			call.Done(linearize.Incr, v+1)
			return nil
		},
		Failed:    func(string, error) { span.Failed() },
		Locked:    func(_ string, l *redlock.Lock) { span.Obtained(l.Fence()) },
		Unlocking: func(_ string, l *redlock.Lock) { span.End(l.Until()) },
	}
	for time.Now().Before(deadline) && ledgerErr == nil {
		job := fmt.Sprint(rand.IntN(jobs))
		span = rec.Start(id, "job:"+job)
		_ = r.Run(ctx, job, 2*time.Second)
	}
	return ledgerErr
}

// TestRunnerUnderFaults runs the job runner on five nodes, each with a
// replica, under the random fault schedule, failovers that lose the newest
// writes included: no two workers may run one job at once, and no charge
// may be lost.
func TestRunnerUnderFaults(t *testing.T) {
	nodes := locktest.Start(t, 5, locktest.WithReplicas())
	addrs := nodes.Addrs()
	kinds := []locktest.FaultKind{locktest.Kill, locktest.Pause, locktest.Partition, locktest.Latency, locktest.Failover}
	s := exercise(t, nodes, [][]string{addrs, addrs}, kinds, 5*time.Second)
	locktest.Verify(t, s.report.History, s.report.Faults)
	if s.holds < 100 {
		t.Errorf("%d holds; want at least 100", s.holds)
	}
	if len(s.report.Faults) == 0 {
		t.Error("the schedule injected no fault")
	}
	res, page, err := linearize.CheckObject(s.charges.Ops(), 0, time.Minute, t.ArtifactDir())
	if err != nil || res != porcupine.Ok {
		t.Errorf("charges: porcupine says %s (%v); visualization: %s", linearize.Verdict(res), err, page)
	}
}

// TestMinorityQuorumControl runs the same session misconfigured: two
// groups of workers whose Clients list different nodes, 0–2 and 2–4 of
// five. Each Client's quorum, 2 of its 3 nodes, is a minority of the
// deployment, so both groups can hold one job's lock at once. The checkers
// must report it, and the timeline must show it: a checker that cannot
// fail proves nothing.
func TestMinorityQuorumControl(t *testing.T) {
	nodes := locktest.Start(t, 5)
	addrs := nodes.Addrs()
	s := exercise(t, nodes, [][]string{addrs[:3], addrs[2:]}, nil, 3*time.Second)
	if s.report.OK() {
		t.Fatalf("the checkers found nothing in a run with a minority quorum: %s", s.report)
	}
	path := filepath.Join(t.ArtifactDir(), "timeline.svg")
	if err := s.report.WriteTimeline(path); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(svg), `fill="red"`) {
		t.Fatalf("timeline %s shows no violation (%v)", path, err)
	}
	t.Logf("timeline (kept with go test -artifacts): %s", path)
	res, _, err := linearize.CheckObject(s.charges.Ops(), 0, time.Minute, "")
	if err != nil || res != porcupine.Illegal {
		t.Errorf("charges: porcupine says %s (%v); want ILLEGAL: overlapping workers lose charges", linearize.Verdict(res), err)
	}
}
