package redlock

import (
	"errors"
	"fmt"
	"strings"
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
	// ErrGuarded is the per-node outcome of a node in its restart guard: it
	// lost its data (a restart without persistence, FLUSHALL, eviction) and
	// refuses to grant any lock for Options.RestartGuard, since it may have
	// forgotten locks that are still valid.
	//
	// A node keeps a state key without expiry (Options.KeyPrefix +
	// "redquorum:node"; on a Redis Cluster node, one per hash slot). The
	// acquire script (and a failing extend) reads it: when it is missing, the
	// node's data is gone with it, so the node records "guarded until node
	// TIME + RestartGuard" and refuses; once that time has passed, it grants
	// again. Since the state lives in the node's own data, the node cannot
	// lose its locks without losing its state.
	//
	// A brand-new deployment is guarded everywhere at once. A round that
	// finds every one of the N nodes guarded, all guards begun within 5
	// seconds of each other, from a Client that has never seen a node out of
	// its guard, takes the nodes for a new deployment: it ends the guard on
	// all of them (each only if its state is still the one the round saw, so
	// that a node that restarts meanwhile stays guarded) and locks without
	// waiting. If a node comes up later than that, each node serves locks
	// once its own guard has run out. What the guard cannot tell from a new
	// deployment: every node losing its data (a restart without persistence,
	// FLUSHALL) within one TTL, with no lock or extend request reaching any
	// of them between the losses (with requests coming, within 5 seconds),
	// seen by a Client created after the losses; a lock held then is
	// forgotten everywhere.
	//
	// On a Redis Cluster node the state is one per hash slot, and a slot
	// that the deployment has not used yet has none: its first lock is
	// refused for RestartGuard, unless it is the first slot of a Client
	// that takes the nodes for a new deployment. Give lock keys few hash
	// tags so that few slots wait.
	ErrGuarded = errors.New("redlock: node in its restart guard")
	// ErrFenceUnknown is the per-node outcome of a node that granted a
	// fenced lock while its fence counter was unknown, because the node lost
	// its data: it does not count toward the quorum of the fence, and the
	// write-back of the next fenced lock it grants in time repairs it. When a
	// quorum of nodes have lost their counters (for example all of them, one
	// after another, with no fenced lock in between), fenced locks fail until
	// an operator sets the field "f" of the state key (see [ErrGuarded]) on
	// every node to at least the highest fence any resource has accepted.
	ErrFenceUnknown = errors.New("redlock: node's fence counter unknown since it lost its data")
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

// Error is the failure of an operation that involved the nodes. It carries
// each node's outcome; errors.Is finds the sentinel ([ErrNotObtained] or
// [ErrNotHeld]), the per-node causes (for example [ErrTaken] or a network
// error) and, when the caller's context ended the operation, ctx.Err().
type Error struct {
	Op     string       // "lock", "unlock" or "extend"
	Key    string       // the key as given by the caller, without prefix; the keys joined by ", " for LockMany
	Quorum int          // nodes needed
	OK     int          // nodes that did what was asked before the decision
	Nodes  []NodeResult // one per node, in the order given to New
	Reason string       // why, when no node is to blame (for example "validity ran out")

	sentinel error
	cause    error // context error, or the quorum package's error
}

// NodeResult is one node's outcome in an operation.
type NodeResult struct {
	Addr string // the node's address, or "node N" when it has none
	Err  error  // nil when the node did what was asked
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s %q: %d of %d nodes, %d needed", e.sentinel.Error(), e.Op, e.Key, e.OK, len(e.Nodes), e.Quorum)
	if e.Reason != "" {
		b.WriteString("; " + e.Reason)
	}
	for _, n := range e.Nodes {
		if n.Err != nil {
			fmt.Fprintf(&b, "; %s: %v", n.Addr, n.Err)
		}
	}
	return b.String()
}

// Unwrap exposes the sentinel, the context error and the per-node errors.
func (e *Error) Unwrap() []error {
	errs := []error{e.sentinel}
	if e.cause != nil {
		errs = append(errs, e.cause)
	}
	return errs
}
