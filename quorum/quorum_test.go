package quorum

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redquorum/redquorum/internal/alloc"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var errNo = errors.New("no")

// node behaviours for a round: each returns after its delay with its error, or
// when its context ends.
type node struct {
	delay time.Duration
	err   error
}

func call(nodes []node) func(ctx context.Context, i int) error {
	return func(ctx context.Context, i int) error {
		select {
		case <-time.After(nodes[i].delay):
			return nodes[i].err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

const long = 10 * time.Second // a delay that a correct round never waits for

func TestAwaitDecides(t *testing.T) {
	for _, tc := range []struct {
		name   string
		nodes  []node
		need   int
		wantOK bool
		ok     int
	}{
		{"all grant", []node{{}, {}, {}, {}, {}}, 3, true, 3},
		{"two slow nodes are not waited for", []node{{}, {}, {}, {delay: long}, {delay: long}}, 3, true, 3},
		{"two failures still reach quorum", []node{{err: errNo}, {}, {err: errNo}, {}, {}}, 3, true, 3},
		{"three failures decide at once although two nodes hang", []node{{err: errNo}, {err: errNo}, {err: errNo}, {delay: long}, {delay: long}}, 3, false, 0},
		{"one node", []node{{}}, 1, true, 1},
		{"one failing node", []node{{err: errNo}}, 1, false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			ctx, cancel := context.WithCancel(t.Context())
			start := time.Now()
			r, ok, err := Run(ctx, len(tc.nodes), tc.need, long/2, call(tc.nodes))
			took := time.Since(start)
			assert.Equal(t, tc.ok, ok)
			if tc.wantOK {
				require.NoError(t, err)
			} else {
				var qe *Error
				require.ErrorAs(t, err, &qe)
				assert.Equal(t, tc.need, qe.Need)
				assert.Equal(t, len(tc.nodes), qe.Total)
				assert.ErrorIs(t, err, errNo)
			}
			// A decision that waited for a hanging node would have taken long/2.
			assert.Less(t, took, long/4, "round waited for a node that could not change the outcome")
			cancel() // hanging nodes end when their context does
			r.Wait()
		})
	}
}

func TestAwaitTimeout(t *testing.T) {
	leakcheck.Check(t)
	// A node that ignores its context must still not hold up the decision.
	block := make(chan struct{})
	defer close(block)
	r := Start(t.Context(), 3, 20*time.Millisecond, func(ctx context.Context, i int) error {
		if i == 0 {
			return nil
		}
		<-block
		return nil
	})
	ok, err := r.Await(t.Context(), 2)
	assert.Equal(t, 1, ok)
	var qe *Error
	require.ErrorAs(t, err, &qe)
	assert.ErrorIs(t, err, ErrTimeout)
	require.Len(t, qe.Nodes(), 2)
	var ne *NodeError
	require.ErrorAs(t, err, &ne)
	assert.ErrorIs(t, ne, ErrTimeout)
	for j, ne := range qe.Nodes() {
		assert.Equal(t, j+1, ne.Node, "unanswered nodes in index order")
		assert.ErrorIs(t, ne, ErrTimeout)
	}
	assert.Contains(t, err.Error(), "needed: node 1: "+ErrTimeout.Error()+"; node 2: ")
	_, returned := r.Result(1)
	assert.False(t, returned)
}

func TestAwaitContextCancelled(t *testing.T) {
	leakcheck.Check(t)
	ctx, cancel := context.WithCancel(t.Context())
	r := Start(ctx, 3, long, call([]node{{}, {delay: long}, {delay: long}}))
	time.AfterFunc(10*time.Millisecond, cancel)
	ok, err := r.Await(ctx, 2)
	assert.Equal(t, 1, ok)
	assert.ErrorIs(t, err, context.Canceled)
	var qe *Error
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, context.Canceled, qe.Ctx)
	assert.Contains(t, err.Error(), "1 of 3 nodes succeeded, 2 needed (context canceled)")
	r.Wait()
}

func TestDoneAndResult(t *testing.T) {
	leakcheck.Check(t)
	release := make(chan struct{})
	r := Start(t.Context(), 3, long, func(ctx context.Context, i int) error {
		if i == 2 {
			<-release
			return errNo
		}
		return nil
	})
	ok, err := r.Await(t.Context(), 2)
	require.NoError(t, err)
	assert.Equal(t, 2, ok)
	_, returned := r.Result(2)
	assert.False(t, returned, "node 2 is still outstanding")
	select {
	case <-r.Done(2):
		t.Fatal("Done(2) closed while node 2 is outstanding")
	default:
	}
	<-r.Done(0) // returned before Done was asked for
	done := r.Done(2)
	close(release)
	<-done
	assert.Equal(t, errNo, r.Outcome(2), "Outcome waits for the call")
	got, returned := r.Result(2)
	assert.True(t, returned)
	assert.Equal(t, errNo, got)
	r.Wait()
}

func TestNodeContextExpires(t *testing.T) {
	leakcheck.Check(t)
	var deadline time.Time
	r := Start(t.Context(), 1, 30*time.Millisecond, func(ctx context.Context, i int) error {
		deadline, _ = ctx.Deadline()
		<-ctx.Done()
		return ctx.Err()
	})
	r.Wait()
	got, _ := r.Result(0)
	assert.ErrorIs(t, got, context.DeadlineExceeded)
	assert.False(t, deadline.IsZero())
}

// socket is a node's call as a client with context deadlines makes it: the
// answer comes after delay unless the context's deadline passes first.
func socket(delay time.Duration) func(ctx context.Context, i int) error {
	return func(ctx context.Context, i int) error {
		d, _ := ctx.Deadline()
		if i == 0 || time.Until(d) > delay {
			time.Sleep(delay * time.Duration(i))
			return nil
		}
		time.Sleep(time.Until(d))
		return context.DeadlineExceeded
	}
}

// A lingering round decides at its timeout, but its late call keeps its
// deadline and returns its answer; without linger, the same call runs out
// the round's deadline.
func TestLinger(t *testing.T) {
	leakcheck.Check(t)
	const timeout, delay = 20 * time.Millisecond, 60 * time.Millisecond
	for _, linger := range []time.Duration{0, time.Second} {
		t.Run(linger.String(), func(t *testing.T) {
			w := NewWorkers()
			defer w.Close()
			before := time.Now()
			r := w.StartLinger(t.Context(), 2, timeout, linger, socket(delay))
			ok, err := r.Await(t.Context(), 2)
			assert.Equal(t, 1, ok)
			var qe *Error
			require.ErrorAs(t, err, &qe)
			require.Len(t, qe.Nodes(), 1)
			late := r.Outcome(1)
			if linger == 0 {
				assert.ErrorIs(t, late, context.DeadlineExceeded)
				return
			}
			assert.ErrorIs(t, qe.Nodes()[0], ErrTimeout, "decided at the timeout")
			assert.NoError(t, late, "the late answer is read")
			// A call that begins after the timeout finds its context done.
			var begun error
			var deadline time.Time
			r2 := w.StartLinger(t.Context(), 1, timeout, linger, func(ctx context.Context, i int) error {
				time.Sleep(2 * timeout)
				begun = ctx.Err()
				deadline, _ = ctx.Deadline()
				return nil
			})
			r2.Wait()
			assert.ErrorIs(t, begun, context.DeadlineExceeded)
			assert.GreaterOrEqual(t, deadline.Sub(before), timeout+linger)
			// Settle returns at the timeout while a call lingers.
			r3 := w.StartLinger(t.Context(), 2, timeout, linger, socket(linger/2))
			r3.Settle()
			_, done := r3.Result(1)
			assert.False(t, done, "Settle waited for the lingering call")
			assert.NoError(t, r3.Outcome(1))
		})
	}
}

func TestZeroNodes(t *testing.T) {
	r, ok, err := Run(t.Context(), 0, 1, time.Second, nil)
	assert.Equal(t, 0, ok)
	assert.Error(t, err)
	r.Wait()
}

func BenchmarkRound(b *testing.B) {
	fn := func(ctx context.Context, i int) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		r, _, err := Run(context.Background(), 5, 3, time.Second, fn)
		if err != nil {
			b.Fatal(err)
		}
		r.Wait()
	}
}

// TestAwaitAfterAllReturned awaits a round whose calls have all returned
// (their context is then cancelled): Await counts the buffered results and
// does not mistake the cancellation for a timeout.
func TestAwaitAfterAllReturned(t *testing.T) {
	leakcheck.Check(t)
	for _, tc := range []struct {
		errs []error
		ok   bool
	}{{[]error{nil, nil, errNo}, true}, {[]error{errNo, nil, errNo}, false}} {
		r := Start(t.Context(), 3, long, func(_ context.Context, i int) error { return tc.errs[i] })
		require.Eventually(t, r.AllDone, 5*time.Second, time.Millisecond)
		ok, err := r.Await(t.Context(), 2)
		if tc.ok {
			require.NoError(t, err)
			assert.Equal(t, 2, ok)
		} else {
			require.Error(t, err)
			assert.NotErrorIs(t, err, ErrTimeout, "the calls answered: no timeout")
			assert.ErrorIs(t, err, errNo)
		}
		r.Wait()
	}
}

// TestWorkersWait: Workers.Wait and Close wait for every call in flight of
// the rounds they started, including the calls whose answers come after
// their round was decided.
func TestWorkersWait(t *testing.T) {
	leakcheck.Check(t)
	w := NewWorkers()
	release := make(chan struct{})
	r := w.Start(t.Context(), 2, long, func(_ context.Context, i int) error {
		if i == 1 {
			<-release
		}
		return nil
	})
	_, err := r.Await(t.Context(), 1)
	require.NoError(t, err)
	waited := make(chan struct{})
	go func() { w.Wait(); close(waited) }()
	assert.NoError(t, r.Outcome(0))
	select {
	case <-waited:
		t.Fatal("Wait returned before the last call returned")
	case <-time.After(20 * time.Millisecond):
	}
	assert.False(t, r.AllDone())
	close(release)
	<-waited
	assert.True(t, r.AllDone())

	// Wait with nothing in flight returns at once; so does Close.
	w.Wait()
	w.Close()
}

// goid returns the calling goroutine's id, from its stack header.
func goid() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	return strings.Fields(string(buf))[1]
}

// TestWorkers: a round's calls run on workers that the next round reuses;
// a call that hangs keeps its worker but does not hold up other rounds; Close
// stops every worker (leakcheck fails otherwise) and may be called twice.
func TestWorkers(t *testing.T) {
	leakcheck.Check(t)
	w := NewWorkers()
	var mu sync.Mutex
	ids := map[string]int{}
	record := func(_ context.Context, i int) error {
		mu.Lock()
		defer mu.Unlock()
		ids[goid()]++
		return nil
	}
	for range 20 {
		r := w.Start(t.Context(), 3, long, record)
		_, err := r.Await(t.Context(), 3)
		require.NoError(t, err)
		r.Wait()
	}
	mu.Lock()
	// 3 when every worker is back in time for the next round; a worker whose
	// call has returned may not be waiting yet when the next round starts.
	assert.LessOrEqual(t, len(ids), 6, "60 calls, 3 at a time, on a few goroutines, not one per call: %v", ids)
	mu.Unlock()

	hang := make(chan struct{})
	r1 := w.Start(t.Context(), 2, long, func(ctx context.Context, i int) error {
		if i == 0 {
			<-hang
		}
		return nil
	})
	r2 := w.Start(t.Context(), 5, long, call([]node{{}, {}, {}, {}, {}}))
	ok, err := r2.Await(t.Context(), 5)
	require.NoError(t, err, "a hanging call of another round holds up nobody")
	assert.Equal(t, 5, ok)
	close(hang)
	_, err = r1.Await(t.Context(), 2)
	require.NoError(t, err)
	r1.Wait()
	r2.Wait()
	w.Close()
	w.Close()
}

// TestLargeRound: a round of more nodes than are allocated with the Round.
func TestLargeRound(t *testing.T) {
	leakcheck.Check(t)
	nodes := make([]node, alloc.Small+3)
	nodes[0].err = errNo
	r, ok, err := Run(t.Context(), len(nodes), len(nodes)-1, long, call(nodes))
	require.NoError(t, err)
	assert.Equal(t, len(nodes)-1, ok)
	r.Wait()
	res, done := r.Result(0)
	assert.True(t, done)
	assert.ErrorIs(t, res, errNo)
}
