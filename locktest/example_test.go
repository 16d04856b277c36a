package locktest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redquorum/redquorum/locktest"
	"github.com/redquorum/redquorum/redlock"
)

// A job runner takes a lock per job, so that no job runs twice at once.
// The test kills a node while the runners work, records each critical
// section, and checks that no two of them held a job's lock at once. In a
// test, use locktest.Start(t, 5) and locktest.Verify(t, ...) instead: they
// clean up in t.Cleanup and fail t with a timeline of the run.
func Example_jobRunner() {
	ctx := context.Background()
	cluster, err := locktest.New(ctx, 5)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	client, _ := redlock.New(redlock.NewNodes(cluster.Addrs()...), &redlock.Options{NodeTimeout: 200 * time.Millisecond})
	defer client.Close()

	var (
		rec  locktest.Recorder
		mu   sync.Mutex
		runs = map[int]int{} // job → times run
		wg   sync.WaitGroup
	)
	runJob := func(worker, job int) {
		key := fmt.Sprintf("job:%d", job)
		span := rec.Start(worker, key)
		lock, err := client.Lock(ctx, key, time.Second)
		if err != nil {
			span.Failed()
			return
		}
		span.Obtained(lock.Fence())
		mu.Lock()
		if runs[job] == 0 {
			time.Sleep(5 * time.Millisecond) // the job's work
			runs[job]++
		}
		mu.Unlock()
		span.End(lock.Until())
		_ = lock.Unlock(ctx)
	}
	killed := make(chan struct{})
	for w := range 3 {
		wg.Go(func() {
			for job := range 20 {
				if job == 10 && w == 0 {
					_ = cluster.Nodes[0].Kill(ctx) // a minority: the runners go on
					close(killed)
				}
				runJob(w, job)
			}
		})
	}
	wg.Wait()
	<-killed
	_ = cluster.Nodes[0].Start(ctx)

	report := locktest.Check(rec.History(), nil)
	fmt.Println("jobs run:", len(runs), "overlapping holds:", len(report.Overlaps))
	// Output:
	// jobs run: 20 overlapping holds: 0
}

// store is a resource that checks fences: it refuses a write whose fence
// is not above the last one it accepted.
type store struct {
	mu    sync.Mutex
	fence uint64
	value string
}

var errStale = errors.New("stale fence")

func (s *store) write(fence uint64, v string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fence <= s.fence {
		return errStale
	}
	s.fence, s.value = fence, v
	return nil
}

// A holder that pauses (a long garbage collection, a frozen VM) past its
// lock's validity must not overwrite the work of the next holder. With
// Fencing, every lock carries a fencing token, and a store that checks it
// refuses the stale holder's write. CheckFences confirms that the tokens
// grew from one hold to the next.
func Example_fencedStore() {
	ctx := context.Background()
	cluster, err := locktest.New(ctx, 3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	client, _ := redlock.New(redlock.NewNodes(cluster.Addrs()...), &redlock.Options{Fencing: true})
	defer client.Close()
	var (
		rec locktest.Recorder
		s   store
	)

	spanA := rec.Start(1, "report")
	a, _ := client.Lock(ctx, "report", 100*time.Millisecond)
	spanA.Obtained(a.Fence())
	time.Sleep(150 * time.Millisecond) // A pauses past its validity
	spanA.End(a.Until())

	spanB := rec.Start(2, "report")
	b, _ := client.Lock(ctx, "report", time.Second)
	spanB.Obtained(b.Fence())
	fmt.Println("B writes:", s.write(b.Fence(), "B's report"))
	spanB.End(b.Until())
	_ = b.Unlock(ctx)

	fmt.Println("A wakes and writes:", s.write(a.Fence(), "A's report"))
	fmt.Println("store holds:", s.value)
	report := locktest.Check(rec.History(), nil)
	fmt.Println("overlaps:", len(report.Overlaps), "fence regressions:", len(report.Fences))
	// Output:
	// B writes: <nil>
	// A wakes and writes: stale fence
	// store holds: B's report
	// overlaps: 0 fence regressions: 0
}
