package redlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/node"
	"github.com/redquorum/redquorum/quorum"
)

var (
	// ErrNotObtained means that a lock round, or every round of Lock, ended
	// without the lock: not enough nodes granted it in time.
	ErrNotObtained = errors.New("redlock: lock not obtained")
	// ErrNotHeld means that Unlock or Extend found fewer than a quorum of nodes
	// still holding the lock's token, or that the lock's validity had already
	// run out locally.
	ErrNotHeld = errors.New("redlock: lock not held")
	// ErrTaken is the per-node outcome of a node whose key holds another
	// owner's token. errors.Is(err, ErrTaken) on a failed lock says that at
	// least one node refused because the lock was busy.
	ErrTaken = errors.New("redlock: key held by another owner")
	// ErrGuarded is the per-node outcome of a node in its restart guard. The
	// node lost its data (a restart without persistence, FLUSHALL, eviction)
	// or its server changed (a failover, a restart from a persisted file).
	// It may have forgotten valid locks, so it grants none for
	// Options.RestartGuard. A brand-new deployment, its nodes all guarded at
	// once, locks without waiting.
	//
	// A node keeps its state in the key Options.KeyPrefix + "redquorum:node",
	// which lock keys must not use. A Cluster or Ring node has one per hash
	// slot or shard, and a slot's first lock waits out its guard: use few
	// hash tags. See docs/SAFETY.md, "The restart guard".
	ErrGuarded = errors.New("redlock: node in its restart guard")
	// ErrFenceUnknown is the per-node outcome of a node that granted a
	// fenced lock while its fence counter was unknown: the node lost its
	// data. It does not count toward the fence's quorum, and the write-back
	// of the next fenced lock it grants in time repairs it. When the nodes
	// with known counters are fewer than a quorum, no fenced lock can repair
	// them. Lock and TryLock then fail at once with this cause, until an
	// operator runs "redlock guard fence". See docs/OPERATING.md, "Fence
	// counters after a loss".
	ErrFenceUnknown = errors.New("redlock: node's fence counter unknown since it lost its data")
	// ErrSameServer means that two nodes of a Client reach one Redis server,
	// for example under two names (localhost:6379 and 127.0.0.1:6379). That
	// server would vote twice toward the quorum. Each new connection's check
	// reads its server's run_id, and refuses a server that another node
	// reaches. From then on every lock fails at once with an error that
	// wraps ErrSameServer (not [ErrNotObtained]) and names both nodes: give
	// each server once. The first lock, during which every node connects,
	// may still obtain the lock, with one vote per server.
	ErrSameServer = errors.New("redlock: two nodes are one server")
	// ErrClosed is returned by every operation of a Client after Close.
	ErrClosed = errors.New("redlock: client closed")
)

// errPending is the per-node outcome of a node that had not answered when the
// outcome was decided without it.
var errPending = errors.New("no answer yet when the outcome was decided")

// errGone is the per-node outcome of an acquire that reached its node after
// the release of its round had: the node refused it (see release.lua).
var errGone = errors.New("refused: this round had already released the node")

// errSkipped is the per-node outcome of a release, extend or fence write-back
// not sent because the node did not grant the acquire.
var errSkipped = errors.New("not sent: the node did not grant the acquire")

// Error is the failure of an operation that involved the nodes, with each
// node's outcome. errors.Is finds the sentinel ([ErrNotObtained] or
// [ErrNotHeld]) and the per-node causes (for example [ErrTaken] or a
// network error). When the caller's context ended the operation, it also
// finds ctx.Err().
type Error struct {
	Op     string       // "lock", "unlock" or "extend"
	Key    string       // the key as given by the caller, without prefix; the keys joined by ", " for LockMany
	Quorum int          // nodes needed
	OK     int          // nodes that did what was asked before the decision
	Nodes  []NodeResult // one per node, in the order given to New
	Reason string       // why, when no node is to blame (for example "validity ran out")

	sentinel error
	cause    error         // the quorum package's error, or another cause
	ctx      error         // the caller's context error, when it ended the operation
	round    *quorum.Round // the calls whose outcomes Nodes holds; nil for none
	// cleanup is the release of what the failed lock round took (see
	// Client.round), which the caller's next round must not overtake; nil
	// for none.
	cleanup *quorum.Round
	// earlier is Lock's round before this one: the message names its
	// causes when this round's nodes tell none (the context ended the
	// round before they answered).
	earlier *Error
}

// NodeResult is one node's outcome in an operation.
type NodeResult struct {
	Addr string // the node's address, or "node N" when it has none
	Err  error  // nil when the node did what was asked
}

// Error returns one line: the operation, the key (shortened when long),
// the nodes' votes and the main cause. The cause is the first that applies.
// Errors no retry fixes come first, when on so many nodes that no quorum
// remains. Fence counters unknown on as many nodes come next. Then come
// nodes that hold the key for another owner, nodes in their restart guard
// with the time left, and failed nodes. Then
// come the reason no node is to blame, and last the caller's context error.
// When the context ended a round before any node told a cause, the causes
// are the round before's. Nodes that had not answered at the decision do
// not count against it. "%+v" also prints each node's outcome (Nodes).
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("redlock: ")
	b.WriteString(e.Op)
	b.WriteString(" " + strconv.Quote(shortKey(e.Key)) + ": ")
	b.WriteString(strings.TrimPrefix(strings.TrimPrefix(e.sentinel.Error(), "redlock: "), "lock "))
	if len(e.Nodes) > 0 {
		fmt.Fprintf(&b, " (%d of %d nodes, %d needed)", e.OK, len(e.Nodes), e.Quorum)
	}
	if c := e.mainCause(); c != "" {
		b.WriteString(": " + c)
	}
	return b.String()
}

// Format prints the one-line message for %v and %s, and with %+v also each
// node's outcome, one per line.
func (e *Error) Format(f fmt.State, verb rune) {
	_, _ = io.WriteString(f, e.Error())
	if verb == 'v' && f.Flag('+') {
		for _, n := range e.Nodes {
			outcome := "ok"
			if n.Err != nil {
				outcome = n.Err.Error()
			}
			_, _ = fmt.Fprintf(f, "\n\t%s: %s", n.Addr, outcome)
		}
	}
}

// mainCause names what decided the outcome (see Error).
func (e *Error) mainCause() string {
	cause := e.nodeCause()
	if cause == "" && e.earlier != nil {
		cause = e.earlier.nodeCause()
	}
	cause = joinReason(cause, e.Reason)
	if e.ctx != nil {
		cause = joinReason(cause, e.ctx.Error())
	}
	return cause
}

// nodeCause names what the nodes' outcomes tell against the operation, or
// returns "" when they tell nothing.
func (e *Error) nodeCause() string {
	hopeless := len(e.Nodes) - e.Quorum // more nodes out make a quorum impossible
	switch fixed, fence, firstFixed := lasting(e.Nodes); {
	case fixed > 0 && fixed > hopeless:
		return fmt.Sprintf("%d %s failed with an error no retry fixes, such as: %s", fixed, nodes(fixed), shorten(firstFixed.Error(), 80))
	case fence > 0 && fence > hopeless:
		return fmt.Sprintf(`fence counter unknown on %d %s (they lost their data); run "redlock guard fence" to repair`, fence, nodes(fence))
	}
	var taken, notOurs, guarded, failed int
	var left time.Duration
	var firstFailure error
	for _, n := range e.Nodes {
		var g *guardError
		switch {
		case n.Err == nil, n.Err == errPending, n.Err == errSkipped, n.Err == errGone, n.Err == node.ErrNotSent:
		case e.ctx != nil && isContextErr(n.Err):
			// Cut short by the caller's context, which the line names.
		case errors.Is(n.Err, ErrTaken):
			taken++
		case errors.Is(n.Err, node.ErrNotOurs):
			notOurs++
		case errors.As(n.Err, &g):
			if guarded == 0 || g.left < left {
				left = g.left
			}
			guarded++
		case errors.Is(n.Err, ErrFenceUnknown):
		default:
			if failed == 0 {
				firstFailure = n.Err
			}
			failed++
		}
	}
	switch {
	case taken > 0:
		return fmt.Sprintf("held by another owner on %d %s", taken, nodes(taken))
	case notOurs > 0:
		return fmt.Sprintf("gone or held by another owner on %d %s", notOurs, nodes(notOurs))
	case guarded > 0:
		return fmt.Sprintf("restart guard on %d %s, %v left", guarded, nodes(guarded), left)
	case failed > 0:
		return fmt.Sprintf("%d %s failed, such as: %s", failed, nodes(failed), shorten(firstFailure.Error(), 80))
	}
	return ""
}

// lasting counts the nodes whose outcome no later round changes: errors
// that no retry fixes (the first of them is first), and unknown fence
// counters.
func lasting(ns []NodeResult) (fixed, fence int, first error) {
	for _, n := range ns {
		switch {
		case unfixable(n.Err):
			if fixed == 0 {
				first = n.Err
			}
			fixed++
		case errors.Is(n.Err, ErrFenceUnknown):
			fence++
		}
	}
	return fixed, fence, first
}

// unfixable reports whether err, a node's outcome, is one that no retry
// fixes. The node may have refused the client's credentials (NOAUTH,
// WRONGPASS) or permissions (NOPERM). A key of the lock may hold another
// type (WRONGTYPE). Or the node's host name may not exist: the DNS answer
// "no such host".
// errors.As finds the go-redis [redis.Error] or the [*net.DNSError].
func unfixable(err error) bool {
	var dns *net.DNSError
	return redis.IsAuthError(err) || redis.IsPermissionError(err) || redis.HasErrorPrefix(err, "WRONGTYPE") ||
		errors.As(err, &dns) && dns.IsNotFound
}

// final reports whether e, the error of a lock round, is one that no later
// round can overcome. That takes errors that no retry fixes, or unknown
// fence counters, on so many nodes that the others are fewer than a quorum.
// When a node's outcome hints at it, final first waits for the nodes that
// had not answered at the decision, within the round's node timeout and
// linger (see Client.start). It
// records their outcomes in e, where errors.Is and errors.As find them.
func (e *Error) final() bool {
	if fixed, fence, _ := lasting(e.Nodes); e.round == nil || fixed+fence == 0 {
		return false
	}
	for i := range e.Nodes {
		if e.Nodes[i].Err == errPending {
			e.Nodes[i].Err = e.round.Outcome(i)
			if e.Nodes[i].Err != nil {
				e.cause = errors.Join(e.cause, e.Nodes[i].Err)
			}
		}
	}
	hopeless := len(e.Nodes) - e.Quorum
	fixed, fence, _ := lasting(e.Nodes)
	return fixed > hopeless || fence > hopeless
}

// isContextErr reports whether err is a context's error, or a socket
// deadline that go-redis set from one.
func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
}

func nodes(n int) string {
	if n == 1 {
		return "node"
	}
	return "nodes"
}

// shorten returns s cut to about n bytes.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// shortKey returns key, or its start and its length when it is longer than
// fits in one line of an error.
func shortKey(key string) string {
	const keep = 48
	if len(key) <= keep+16 {
		return key
	}
	return fmt.Sprintf("%s… (%d bytes)", key[:keep], len(key))
}

// guardError is the per-node outcome of a node in its restart guard: it
// wraps [ErrGuarded] and says how long the guard has left.
type guardError struct{ left time.Duration }

func (e *guardError) Error() string { return fmt.Sprintf("%v, %v left", ErrGuarded, e.left) }
func (e *guardError) Unwrap() error { return ErrGuarded }

// Unwrap exposes the sentinel, the per-node errors, the caller's context
// error, and the round before when the message names its causes.
func (e *Error) Unwrap() []error {
	errs := []error{e.sentinel}
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	if e.ctx != nil {
		errs = append(errs, e.ctx)
	}
	if e.earlier != nil && e.nodeCause() == "" {
		errs = append(errs, e.earlier)
	}
	return errs
}
