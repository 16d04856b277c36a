package redlock

import (
	"context"
	"time"
)

// Observer receives what a [Client] does, for metrics, traces or logs; set
// it as Options.Observer. The library depends on none of those packages.
// Every field may be nil, and a nil *Observer costs nothing.
//
// Hooks run synchronously on the goroutine of the call they report, after
// its node requests were decided. A slow hook delays its caller, never a
// node request. Hooks may be called concurrently. A hook that panics loses
// its event, and the first such panic is logged. A hook may keep an event,
// but must not modify its Keys.
type Observer struct {
	// Begin, when set, is called as an operation begins, with the caller's
	// context and the keys as given. The context it returns (nil means ctx)
	// becomes the operation's context: node requests use it and End gets
	// it. A tracer can start a span here and end it in End. The context
	// must not cancel sooner than ctx.
	Begin func(ctx context.Context, op Op, keys []string) context.Context

	// End receives every Lock, TryLock, LockMany, TryLockMany, Extend,
	// Unlock and Do as it returns.
	End func(ctx context.Context, e Event)

	// Do receives each extension made by [Client.Do] while its function
	// runs, and the loss of its lock.
	Do func(ctx context.Context, e DoEvent)

	// Node receives the changes of a node's state as this Client sees it
	// in the answers to its operations (see [NodeChange]).
	Node func(ctx context.Context, e NodeEvent)
}

// Op names an operation in an [Event].
type Op string

// The operations of a [Client] and a [Lock].
const (
	OpLock        Op = "lock"
	OpTryLock     Op = "trylock"
	OpLockMany    Op = "lockmany"
	OpTryLockMany Op = "trylockmany"
	OpExtend      Op = "extend"
	OpUnlock      Op = "unlock"
	OpDo          Op = "do"

	OpAcquire    Op = "acquire"    // Semaphore.Acquire; its Keys are the semaphore's name
	OpTryAcquire Op = "tryacquire" // Semaphore.TryAcquire
	OpRLock      Op = "rlock"      // RWMutex.RLock; its Keys are the read-write lock's name
	OpTryRLock   Op = "tryrlock"   // RWMutex.TryRLock
	OpWLock      Op = "wlock"      // RWMutex.Lock
	OpTryWLock   Op = "trywlock"   // RWMutex.TryLock
)

// Obtains reports whether op obtains a lock when it succeeds: a Lock of
// any kind, a Semaphore's permit or a RWMutex's lock (whose Unlock is
// OpUnlock).
func (op Op) Obtains() bool {
	switch op {
	case OpLock, OpTryLock, OpLockMany, OpTryLockMany, OpAcquire, OpTryAcquire, OpRLock, OpTryRLock, OpWLock, OpTryWLock:
		return true
	}
	return false
}

// Outcome is how an operation ended; its values are few and fixed, fit for
// a metric label.
type Outcome string

// The outcomes of an [Event]. An operation that failed takes the first that
// applies, in the order below from Cancelled on.
const (
	Obtained Outcome = "obtained" // Lock, TryLock, LockMany, TryLockMany: the lock is held
	Extended Outcome = "extended" // Extend: the lock is held longer
	Released Outcome = "released" // Unlock: released or handed over; Do: held while fn ran, then unlocked

	Cancelled Outcome = "cancelled" // the caller's context was cancelled
	TimedOut  Outcome = "timed_out" // the caller's deadline or Options.MaxWait passed
	Lost      Outcome = "lost"      // Extend, Unlock: fewer than a quorum still held the lock (ErrNotHeld); Do: ErrLockLost
	Taken     Outcome = "taken"     // some node holds the key for another owner (ErrTaken)
	Guarded   Outcome = "guarded"   // nodes in their restart guard refused (ErrGuarded)
	Failed    Outcome = "failed"    // anything else: nodes failed or did not answer, bad arguments, ErrClosed
)

// Event is one operation, reported to Observer.End as it returns.
type Event struct {
	Op      Op
	Keys    []string // as given by the caller, without Options.KeyPrefix
	Outcome Outcome
	Err     error // what the operation returned

	Start    time.Time     // on the Client's clock (Options.Clock)
	Duration time.Duration // the whole call
	// Waited is, for Lock, LockMany, Semaphore.Acquire, RWMutex.RLock and
	// RWMutex.Lock, the part of Duration spent between rounds: in the
	// Client's local queue for the key and backing off.
	Waited time.Duration
	// Held is, for Unlock and Do, the time since the start of the round
	// that obtained the lock.
	Held time.Duration
	// Ended is set on the Unlock that ended the lock's life in this
	// Client, and on a Do whose lock was obtained; not on a repeated
	// Unlock.
	Ended bool
	// Rounds are the operation's rounds of requests to the nodes, in order.
	// There are none for a call refused before any (bad arguments, an Unlock
	// that handed the lock over), one for TryLock, Extend and Unlock, and one
	// or more for Lock. Do reports its rounds in the events of its Lock,
	// Extend and Unlock.
	Rounds []Round
}

// Round is one round of requests to every node.
type Round struct {
	Start    time.Time     // on the Client's clock
	Duration time.Duration // until the round was decided
	Granted  int           // nodes that did what was asked, as known at the end of the round
	Nodes    []Vote        // one per node, in the order given to New
}

// Vote is one node's answer in a round.
type Vote struct {
	Node    string // the node's address, or "node N"
	Outcome VoteOutcome
	Err     error         // the node's error; nil when it granted, unless ErrFenceUnknown
	Latency time.Duration // from the call to its outcome, an answer or an error; 0 when pending or skipped
}

// VoteOutcome is a node's answer in a round; its values are few and fixed.
type VoteOutcome string

// Answered reports whether the node answered: granted, taken, guarded or
// refused.
func (v VoteOutcome) Answered() bool {
	return v == VoteGranted || v == VoteTaken || v == VoteGuarded || v == VoteRefused
}

// The outcomes of a [Vote].
const (
	VoteGranted VoteOutcome = "granted" // the node did what was asked
	VoteTaken   VoteOutcome = "taken"   // the key holds another owner's token
	VoteGuarded VoteOutcome = "guarded" // the node is in its restart guard
	VoteRefused VoteOutcome = "refused" // Extend, Unlock: the key is gone or holds another token
	VoteFailed  VoteOutcome = "failed"  // an error or no answer within Options.NodeTimeout
	VotePending VoteOutcome = "pending" // no answer yet when the round was decided
	VoteSkipped VoteOutcome = "skipped" // not sent: the node had refused the acquire, or was busy
)

// DoEvent is an extension made by [Client.Do], or the loss of its lock.
type DoEvent struct {
	Key  string
	Time time.Time // on the Client's clock
	// Extension counts Do's successful extensions, from 1; it is 0 for a
	// loss.
	Extension int
	// Outcome is Extended or Lost: an extension that failed, or validity
	// that ran out, loses the lock, and Err says why.
	Outcome Outcome
	Err     error
}

// NodeChange is a change of a node's state as a Client sees it. It comes
// from the answers to the Client's own requests that arrived before the
// operation returned; a late answer is ignored, and a node nobody asks does
// not change. Every node starts reachable and out of its guard. Each change
// is reported once. When operations race, two changes of one node may reach
// the hook out of order, but counting each change of a pair as +1 or −1
// always adds up to the current state.
type NodeChange string

// The changes of a [NodeEvent].
const (
	// GuardEntered: the node answered an acquire from its restart guard,
	// a guard that no new-deployment shortcut is ending (see Established).
	GuardEntered NodeChange = "guard_entered"
	// GuardLeft: the node answered an acquire out of its guard again.
	GuardLeft NodeChange = "guard_left"
	// Unreachable: a request failed without an answer from Redis (a
	// network error, or no answer within Options.NodeTimeout).
	Unreachable NodeChange = "unreachable"
	// Reachable: the node answered again after being Unreachable.
	Reachable NodeChange = "reachable"
	// Established: this Client's new-deployment shortcut ended the node's
	// first guard, so the node serves at once. It is reported once per node
	// and Client, has no opposite, and counts toward no state. A brand-new
	// deployment's guarded answers are not reported as GuardEntered: only a
	// guard that no shortcut is ending is, such as one begun after a loss of
	// data.
	Established NodeChange = "established"
)

// NodeEvent is a change of a node's state.
type NodeEvent struct {
	Node   string // the node's address, or "node N"
	Index  int    // its position in the nodes given to New
	Change NodeChange
	Err    error     // for Unreachable, the request's error
	Time   time.Time // on the Client's clock
}

// JoinObservers returns an Observer that calls the hooks of each of obs in
// turn, skipping nil entries and hooks: for example a Prometheus adapter's
// metrics and an OpenTelemetry adapter's traces. Begin threads the context
// through each Begin in order. A hook that panics also skips the hooks
// after it for that event. It returns nil when no hook is set.
func JoinObservers(obs ...*Observer) *Observer {
	var begins []func(context.Context, Op, []string) context.Context
	var ends []func(context.Context, Event)
	var dos []func(context.Context, DoEvent)
	var nodes []func(context.Context, NodeEvent)
	for _, o := range obs {
		if o == nil {
			continue
		}
		if o.Begin != nil {
			begins = append(begins, o.Begin)
		}
		if o.End != nil {
			ends = append(ends, o.End)
		}
		if o.Do != nil {
			dos = append(dos, o.Do)
		}
		if o.Node != nil {
			nodes = append(nodes, o.Node)
		}
	}
	if len(begins)+len(ends)+len(dos)+len(nodes) == 0 {
		return nil
	}
	j := &Observer{End: fanOut(ends), Do: fanOut(dos), Node: fanOut(nodes)}
	if len(begins) > 0 {
		j.Begin = func(ctx context.Context, op Op, keys []string) context.Context {
			for _, b := range begins {
				if next := b(ctx, op, keys); next != nil {
					ctx = next
				}
			}
			return ctx
		}
	}
	return j
}

// fanOut returns a hook that calls each of hooks, or nil for none.
func fanOut[E any](hooks []func(context.Context, E)) func(context.Context, E) {
	if len(hooks) == 0 {
		return nil
	}
	return func(ctx context.Context, e E) {
		for _, h := range hooks {
			h(ctx, e)
		}
	}
}
