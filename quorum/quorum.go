package quorum

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/redquorum/redquorum/internal/alloc"
)

// ErrTimeout is the per-node error of a node that had not answered by the
// round's timeout.
var ErrTimeout = errors.New("quorum: node did not answer within the timeout")

// NodeError is the failure of one node in a round.
type NodeError struct {
	Node int   // index of the node, as passed to fn
	Err  error // what fn returned, or ErrTimeout
}

func (e *NodeError) Error() string { return fmt.Sprintf("node %d: %v", e.Node, e.Err) }
func (e *NodeError) Unwrap() error { return e.Err }

// Error reports a round that did not reach its quorum.
// [Error.Nodes] returns one [*NodeError] per node that failed or had not
// answered at the decision. errors.Is and errors.As see each of them.
type Error struct {
	OK    int   // nodes that succeeded before the decision
	Need  int   // the quorum
	Total int   // nodes in the round
	Ctx   error // the caller's ctx.Err() if ctx was done at the decision, else nil

	nodes *multierror.Error // *NodeError each, in the order they were learned
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("quorum: %d of %d nodes succeeded, %d needed", e.OK, e.Total, e.Need)
	if e.Ctx != nil {
		msg += " (" + e.Ctx.Error() + ")"
	}
	for i, err := range e.Nodes() {
		if i == 0 {
			msg += ": "
		} else {
			msg += "; "
		}
		msg += err.Error()
	}
	return msg
}

// Nodes returns the per-node failures in the order they were learned: one
// per node that failed or had not answered at the decision.
func (e *Error) Nodes() []*NodeError {
	if e.nodes == nil {
		return nil
	}
	nodes := make([]*NodeError, len(e.nodes.Errors))
	for i, err := range e.nodes.Errors {
		nodes[i] = err.(*NodeError) // Await appends nothing else
	}
	return nodes
}

// Unwrap exposes the caller's context error and the per-node errors to
// errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	errs := make([]error, 0, 2)
	if e.Ctx != nil {
		errs = append(errs, e.Ctx)
	}
	if e.nodes != nil {
		errs = append(errs, e.nodes)
	}
	return errs
}

type result struct {
	node int
	err  error
}

// Round is one call of a function on each of n nodes, started by [Start].
// Its methods are safe for concurrent use, except that [Round.Await] may be
// called only once.
type Round struct {
	wg      sync.WaitGroup
	n       int
	fn      func(ctx context.Context, node int) error
	nodes   []outcome    // one per node
	results chan result  // buffered to n: senders never block
	left    atomic.Int32 // calls still running; the last one to return cancels their context
	nctx    context.Context
	cancel  context.CancelFunc
	cctx    lingerCtx       // the calls' context when they may linger (see StartLinger)
	calls   *sync.WaitGroup // the Workers' count of calls in flight; nil without Workers

	mu sync.Mutex // guards the outcomes' done channels
}

// outcome is one node's call and what it returned.
type outcome struct {
	err      error         // valid once returned is set
	returned atomic.Bool   // the call has returned
	done     chan struct{} // made by Outcome on demand (guarded by Round.mu); closed when the call returns
}

// Start calls fn(nctx, i) for every i in [0, n), each in its own goroutine,
// and returns at once. nctx is derived from ctx and expires after timeout,
// which must be positive. The goroutines belong to the Round, and
// [Round.Wait] waits for them.
func Start(ctx context.Context, n int, timeout time.Duration, fn func(ctx context.Context, node int) error) *Round {
	return (*Workers)(nil).Start(ctx, n, timeout, fn)
}

// Workers runs the calls of rounds on goroutines that outlive a round,
// saving a goroutine and its allocation per call. A call goes to an idle
// worker if there is one, else to a new worker, which then waits for its
// next call until [Workers.Close].
// There are about as many workers as calls that ran at once, or a few more:
// a worker whose call has just returned is not idle yet.
// A nil *Workers starts a goroutine per call.
//
// Workers counts the calls in flight of its rounds, late answers included.
// [Workers.Wait] and [Workers.Close] wait for them, with no goroutine per round.
// It is not a [golang.org/x/sync/errgroup.Group]: a round decides at a quorum,
// not at the first error or the last call.
type Workers struct {
	jobs  chan job      // unbuffered: a send succeeds only to an idle worker
	quit  chan struct{} // closed by Close
	stop  sync.Once
	wg    sync.WaitGroup // the workers
	calls sync.WaitGroup // the calls started and not yet returned
}

type job struct {
	r *Round
	i int
}

// NewWorkers returns a pool without workers yet.
func NewWorkers() *Workers {
	return &Workers{jobs: make(chan job), quit: make(chan struct{})}
}

// Wait blocks until every call of the rounds started so far has returned.
// As with [sync.WaitGroup], Start must not run concurrently with a Wait
// that could find no call in flight.
func (w *Workers) Wait() { w.calls.Wait() }

// Close waits for every call in flight to return, then stops the workers
// and waits for them. It is safe to call more than once. Start must not be
// called after Close.
func (w *Workers) Close() {
	w.calls.Wait()
	w.stop.Do(func() { close(w.quit) })
	w.wg.Wait()
}

// work runs j, then every call handed to it, until Close.
func (w *Workers) work(j job) {
	defer w.wg.Done()
	for {
		j.r.run(j.i)
		select {
		case j = <-w.jobs:
		case <-w.quit:
			return
		}
	}
}

// Start is [Start] with the calls run by w's workers.
func (w *Workers) Start(ctx context.Context, n int, timeout time.Duration, fn func(ctx context.Context, node int) error) *Round {
	return w.StartLinger(ctx, n, timeout, 0, fn)
}

// StartLinger is [Workers.Start], except that a call may go on reading its
// node's answer for up to linger after the round's timeout. The calls'
// context is done, and its Err set, at the round's timeout, as with Start,
// so a call that has not begun by then need not begin. Its deadline is
// linger later: the deadline that a client applies to socket reads and
// writes. A call in flight at the timeout thus still gets its answer, which
// [Round.Outcome] and [Round.Result] report, instead of abandoning its
// connection mid-read; [Round.Await] decides at the timeout regardless. A
// nil *Workers starts a goroutine per call.
func (w *Workers) StartLinger(ctx context.Context, n int, timeout, linger time.Duration, fn func(ctx context.Context, node int) error) *Round {
	r, nodes := alloc.WithSlice[Round, outcome](n) // one allocation for up to alloc.Small nodes
	r.nodes = nodes
	r.n, r.fn, r.results = n, fn, make(chan result, n)
	r.nctx, r.cancel = context.WithTimeout(ctx, timeout)
	if linger > 0 {
		d, _ := r.nctx.Deadline()
		r.cctx = lingerCtx{Context: r.nctx, deadline: d.Add(linger)}
	}
	r.left.Store(int32(n))
	r.wg.Add(n)
	if w != nil {
		r.calls = &w.calls
		w.calls.Add(n)
	}
	for i := range n {
		if w == nil {
			go r.run(i)
			continue
		}
		select {
		case w.jobs <- job{r, i}:
		default:
			w.wg.Add(1)
			go w.work(job{r, i})
		}
	}
	if n == 0 {
		r.cancel()
	}
	return r
}

// run makes node i's call and records its outcome.
func (r *Round) run(i int) {
	defer r.wg.Done()
	var ctx context.Context = r.nctx
	if r.cctx.Context != nil {
		ctx = &r.cctx
	}
	err := r.fn(ctx, i)
	o := &r.nodes[i]
	o.err = err
	r.mu.Lock()
	o.returned.Store(true)
	if o.done != nil {
		close(o.done)
	}
	r.mu.Unlock()
	r.results <- result{i, err}
	if r.left.Add(-1) == 0 {
		r.cancel()
	}
	if r.calls != nil {
		r.calls.Done()
	}
}

// lingerCtx is the round's context with a later deadline (see
// [Workers.StartLinger]). A context may end before its deadline, as a
// cancelled one does: this one ends at the round's timeout.
type lingerCtx struct {
	context.Context
	deadline time.Time
}

func (c *lingerCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// Await blocks until the round is decided and returns how many nodes had
// succeeded by then. It returns a nil error once need nodes have succeeded.
// It returns an [*Error] once so many failed that need is out of reach,
// once the round's timeout has passed since Start, or once ctx is done.
// It never waits for a node whose answer cannot change the outcome.
// Calls still outstanding keep running until they return or their context
// ends (its deadline, with [Workers.StartLinger]). [Round.Outcome] and
// [Round.Wait] wait for them.
func (r *Round) Await(ctx context.Context, need int) (int, error) {
	var (
		ok, failed int
		errs       *multierror.Error
		seen       = make([]bool, r.n)
		// The calls' context expires at the round's timeout; it is also
		// cancelled once every call has returned, and then every result is
		// already buffered.
		expired = r.nctx.Done()
	)
	fail := func() (int, error) {
		// A context that ended while the nodes failed is usually why they
		// failed (go-redis reports a deadline as an i/o timeout): name it.
		return ok, &Error{OK: ok, Need: need, Total: r.n, Ctx: ctx.Err(), nodes: errs}
	}
	for ok < need {
		if r.n-failed < need {
			return fail()
		}
		select {
		case res := <-r.results:
			seen[res.node] = true
			if res.err == nil {
				ok++
				continue
			}
			failed++
			errs = multierror.Append(errs, &NodeError{Node: res.node, Err: res.err})
		case <-expired:
			if ctx.Err() != nil {
				return fail()
			}
			if r.left.Load() == 0 && !errors.Is(r.nctx.Err(), context.DeadlineExceeded) {
				expired = nil // every call returned: read the buffered results
				continue
			}
			for i, s := range seen {
				if !s {
					errs = multierror.Append(errs, &NodeError{Node: i, Err: ErrTimeout})
				}
			}
			return fail()
		case <-ctx.Done():
			return fail()
		}
	}
	return ok, nil
}

// Outcome blocks until node i's call has returned and returns what it
// returned.
func (r *Round) Outcome(i int) error {
	o := &r.nodes[i]
	if o.returned.Load() {
		return o.err
	}
	<-r.Done(i)
	return o.err
}

// Done returns a channel that is closed once node i's call has returned;
// [Round.Result] then reports what it returned.
func (r *Round) Done(i int) <-chan struct{} {
	o := &r.nodes[i]
	r.mu.Lock()
	defer r.mu.Unlock()
	if o.done == nil {
		o.done = make(chan struct{})
		if o.returned.Load() {
			close(o.done)
		}
	}
	return o.done
}

// Result returns what node i's call returned and true, or nil and false if
// it has not returned yet.
func (r *Round) Result(i int) (error, bool) {
	if o := &r.nodes[i]; o.returned.Load() {
		return o.err, true
	}
	return nil, false
}

// AllDone reports whether every call of the round has returned.
func (r *Round) AllDone() bool { return r.left.Load() == 0 }

// Wait blocks until every call of the round has returned.
func (r *Round) Wait() { r.wg.Wait() }

// Settle blocks until every call of the round has returned, or until the
// round's timeout has passed or its context ended, whichever comes first.
// Calls that linger past the timeout (see [Workers.StartLinger]) go on.
func (r *Round) Settle() { <-r.nctx.Done() }

// Run is Start followed by Await. It returns once the outcome is decided,
// with the Round for the calls that may still be outstanding.
func Run(ctx context.Context, n, need int, timeout time.Duration, fn func(ctx context.Context, node int) error) (*Round, int, error) {
	r := Start(ctx, n, timeout, fn)
	ok, err := r.Await(ctx, need)
	return r, ok, err
}
