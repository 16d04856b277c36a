package quorum

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-multierror"
	"golang.org/x/sync/errgroup"
)

// ErrTimeout is the per-node error of a node that had not answered when the
// round's timeout passed.
var ErrTimeout = errors.New("quorum: node did not answer within the timeout")

// NodeError is the failure of one node in a round.
type NodeError struct {
	Node int   // index of the node, as passed to fn
	Err  error // what fn returned, or ErrTimeout
}

func (e *NodeError) Error() string { return fmt.Sprintf("node %d: %v", e.Node, e.Err) }
func (e *NodeError) Unwrap() error { return e.Err }

// Error reports a round that did not reach its quorum. Its Nodes hold one
// [*NodeError] per node that failed or had not answered at the decision.
type Error struct {
	OK    int               // nodes that succeeded before the decision
	Need  int               // the quorum
	Total int               // nodes in the round
	Nodes *multierror.Error // per-node failures, in the order they were learned
	Ctx   error             // the caller's ctx.Err() if ctx was done at the decision, else nil
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("quorum: %d of %d nodes succeeded, %d needed", e.OK, e.Total, e.Need)
	if e.Ctx != nil {
		msg += " (" + e.Ctx.Error() + ")"
	}
	if e.Nodes != nil && len(e.Nodes.Errors) > 0 {
		msg += ": "
		for i, err := range e.Nodes.Errors {
			if i > 0 {
				msg += "; "
			}
			msg += err.Error()
		}
	}
	return msg
}

// Unwrap exposes the caller's context error and the per-node errors to
// errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	errs := make([]error, 0, 2)
	if e.Ctx != nil {
		errs = append(errs, e.Ctx)
	}
	if e.Nodes != nil {
		errs = append(errs, e.Nodes)
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
	g       errgroup.Group
	n       int
	timeout time.Duration
	errs    []error         // errs[i] is valid once done[i] is closed
	done    []chan struct{} // closed when node i's call has returned
	results chan result     // buffered to n: senders never block
	left    atomic.Int32    // calls still running; the last one to return cancels their context
	cancel  context.CancelFunc
}

// Start calls fn(nctx, i) for every i in [0, n) in its own goroutine and
// returns at once. nctx is derived from ctx and expires after timeout, which
// must be positive. The goroutines belong to the Round: [Round.Wait] waits
// for them.
func Start(ctx context.Context, n int, timeout time.Duration, fn func(ctx context.Context, node int) error) *Round {
	r := &Round{
		n:       n,
		timeout: timeout,
		errs:    make([]error, n),
		done:    make([]chan struct{}, n),
		results: make(chan result, n),
	}
	nctx, cancel := context.WithTimeout(ctx, timeout)
	r.cancel = cancel
	r.left.Store(int32(n))
	for i := range n {
		r.done[i] = make(chan struct{})
		r.g.Go(func() error {
			err := fn(nctx, i)
			r.errs[i] = err
			close(r.done[i])
			r.results <- result{i, err}
			if r.left.Add(-1) == 0 {
				r.cancel()
			}
			return nil
		})
	}
	if n == 0 {
		r.cancel()
	}
	return r
}

// Await blocks until need nodes have succeeded (it returns nil), until so
// many have failed that need can no longer be reached, until the round's
// timeout has passed since Start, or until ctx is done; in those cases it
// returns an [*Error]. It never waits for a node whose answer cannot change the
// outcome. Calls still outstanding keep running until they return or their
// context expires; use [Round.Done] or [Round.Wait] to wait for them.
//
// Await returns the number of nodes that had succeeded at the decision.
func (r *Round) Await(ctx context.Context, need int) (int, error) {
	var (
		ok, failed int
		errs       *multierror.Error
		seen       = make([]bool, r.n)
		timer      = time.NewTimer(r.timeout)
	)
	defer timer.Stop()
	fail := func() (int, error) {
		// A context that ended while the nodes failed is usually why they
		// failed (go-redis reports a deadline as an i/o timeout): name it.
		return ok, &Error{OK: ok, Need: need, Total: r.n, Nodes: errs, Ctx: ctx.Err()}
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
		case <-timer.C:
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

// Done returns a channel that is closed when node i's call has returned.
func (r *Round) Done(i int) <-chan struct{} { return r.done[i] }

// Result returns what node i's call returned and true, or nil and false if
// it has not returned yet.
func (r *Round) Result(i int) (error, bool) {
	select {
	case <-r.done[i]:
		return r.errs[i], true
	default:
		return nil, false
	}
}

// Wait blocks until every call of the round has returned.
func (r *Round) Wait() { _ = r.g.Wait() }

// Run is Start followed by Await: it returns when the outcome is decided, and
// the Round for the calls that may still be outstanding.
func Run(ctx context.Context, n, need int, timeout time.Duration, fn func(ctx context.Context, node int) error) (*Round, int, error) {
	r := Start(ctx, n, timeout, fn)
	ok, err := r.Await(ctx, need)
	return r, ok, err
}
