package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redquorum/redquorum/internal/hashslot"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/retry"
)

// ErrNoLeader means that nobody leads an election: a quorum of the nodes
// answered, and no candidate's lock can be on a quorum of the nodes, even
// counting those that did not answer.
var ErrNoLeader = errors.New("redlock: no leader")

// ErrResigned is the cause with which [Leadership.Context] is cancelled
// when the leader resigns ([Leadership.Resign]).
var ErrResigned = errors.New("redlock: leadership resigned")

// Election elects one leader among the callers of Campaign with one name,
// in any number of processes. An Election is a name and its Client: it
// holds no state, and is safe for concurrent use.
//
// It is a layer over [Client.Do]'s lock. The leader holds the lock keyed by
// the election's name, extended while it leads. Its term is the lock's
// fence, on any Client. The leader also publishes a record (its term,
// value and lock token) that [Election.Leader] and [Election.Observe]
// read. The nodes take the record only while they hold the lock, and it
// expires with the lock. Why terms are fences: docs/DESIGN.md, "Elections".
type Election struct {
	c    *Client
	name string
}

// Election returns the election named name on c's nodes. Its lock key is
// name itself, and its record key is Options.KeyPrefix +
// "redquorum:leader:" + name. The methods check the name, and return an
// error naming it when it is not a valid lock key. On a Redis Cluster or
// Ring node, the name needs a hash tag, as in "{scheduler}".
//
// The election's lock always carries a fence, its term, whatever
// Options.Fencing says for c's own locks.
func (c *Client) Election(name string) *Election { return &Election{c: c, name: name} }

// forElections returns the Client whose locks c's elections take. That is
// c under Options.Fencing. Else it is a Client made once, with
// Options.Fencing and WaitInLine, on the node clients c sends through. It
// shares c's connections and their checks, c's Observer, and what c knows
// of the nodes. Close closes it with c.
func (c *Client) forElections() (*Client, error) {
	if c.cfg.fencing {
		return c, nil
	}
	c.electionsOnce.Do(func() {
		select {
		case <-c.life.closing:
			c.electionsErr = ErrClosed
			return
		default:
		}
		cfg := c.cfg
		cfg.fencing, cfg.waiting, cfg.asGiven, cfg.checked = true, WaitInLine, true, true
		c.elections, c.electionsErr = newClient(c.clients, cfg)
		if c.electionsErr != nil {
			c.electionsErr = fmt.Errorf("redlock: elections need fenced locks: %w", c.electionsErr)
			return
		}
		c.elections.obs = c.obs // one node state for both: the Observer hears each change once
	})
	return c.elections, c.electionsErr
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// keys returns the election's lock key and record key, as stored.
func (e *Election) keys() []string {
	return []string{e.c.stored(e.name), e.c.stored(protocol.LeaderPrefix + e.name)}
}

// check validates the election's name.
func (e *Election) check() error {
	if err := e.c.checkKeys([]string{e.name}); err != nil {
		return fmt.Errorf("%w (the election's name)", err)
	}
	k := e.keys()
	if e.c.sharded && hashslot.Hashed(k[0]) != hashslot.Hashed(k[1]) {
		return fmt.Errorf("redlock: election name %q has no hash tag: a node is a Redis Cluster or Ring, where the election's lock and record must share a hash slot; name it as in {scheduler}", e.name)
	}
	return nil
}

// LeaderInfo is an election's leader, as a quorum of nodes agree. The zero
// LeaderInfo, Term 0, means that nobody leads.
type LeaderInfo struct {
	Value string        // what the leader published, by Campaign or Proclaim
	Term  uint64        // the leader's term: its lock's fence
	Owner string        // the leading Client's Options.Owner
	TTL   time.Duration // how long a quorum of nodes still hold the leader's lock
}

// Campaign makes the caller a candidate with value, and blocks until it
// leads the election or ctx ends. It waits for the lock as [Client.Lock]
// does, but without Options.MaxWait, and wakes when the leader resigns.
// Holding the lock, it publishes value and its term on a quorum of nodes.
// The [Leadership] it returns extends the lock to ttl about every ttl/3.
//
// When ctx ends, the error wraps ctx.Err(), and [ErrNotObtained] if ctx
// ended the wait for the lock; no lock is left behind. An empty value, a
// ttl that Lock refuses, or nodes whose locks cannot carry fences (see
// Options.Fencing) give an error naming the cause, and nothing is sent.
func (e *Election) Campaign(ctx context.Context, value string, ttl time.Duration) (*Leadership, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	if value == "" {
		return nil, fmt.Errorf("redlock: election %q: Campaign with an empty value", e.name)
	}
	ttl, err := e.c.checkTTL(ttl)
	if err != nil {
		return nil, err
	}
	c, err := e.c.forElections()
	if err != nil {
		return nil, fmt.Errorf("redlock: election %q: %w", e.name, err)
	}
	e = &Election{c: c, name: e.name} // its Leadership's: on the Client of its lock
	for failed := 0; ; failed++ {
		l, err := c.lock(ctx, OpLock, []string{e.name}, ttl, waitCtx)
		if err != nil {
			return nil, err
		}
		lead, err := e.lead(ctx, l, value, ttl)
		if err == nil {
			return lead, nil
		}
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*c.cfg.nodeTimeout)
		_ = l.Unlock(uctx)
		cancel()
		// The record did not reach a quorum in time: try again after a
		// backoff, unless no retry can fix it.
		var qe *Error
		if errors.As(err, &qe) && qe.final() {
			return nil, err
		}
		select {
		case <-ctx.Done():
			if !errors.Is(err, ctx.Err()) {
				err = joinErrs(err, ctx.Err(), nil)
			}
			return nil, err
		case <-c.life.closing:
			return nil, ErrClosed
		case <-c.cfg.clock.After(retry.Delay(failed, c.cfg.minRetry, c.cfg.maxRetry)):
		}
	}
}

// Leadership is one term of a leader, returned by [Election.Campaign]. Its
// methods are safe for concurrent use.
//
// Act as the leader only while Done is open. Pass [Leadership.Term] with
// every write to the resource the leader guards, which should refuse a
// term lower than the highest it has seen.
type Leadership struct {
	e   *Election
	l   *Lock
	ttl time.Duration

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}
	ended  sync.Once

	stop    chan struct{} // closed to stop the extensions
	watched chan struct{} // closed when the extensions have stopped
	stopped sync.Once

	mu  sync.Mutex // orders the writes of the record
	rec protocol.Record
}

// lead publishes l's record with value and starts the leadership's
// extensions. It returns an error when a quorum of nodes did not take the
// record within l's validity.
func (e *Election) lead(ctx context.Context, l *Lock, value string, ttl time.Duration) (*Leadership, error) {
	lead := &Leadership{
		e: e, l: l, ttl: ttl,
		done: make(chan struct{}), stop: make(chan struct{}), watched: make(chan struct{}),
		rec: protocol.Record{Term: l.Fence(), Rev: 1, Token: l.Token(), Value: value},
	}
	if err := lead.write(ctx, "campaign", lead.rec, true); err != nil {
		return nil, err
	}
	lead.ctx, lead.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	go func() {
		defer close(lead.watched)
		why := e.c.watch(ctx, l, ttl, lead.stop, func(int) { lead.refresh() })
		if why != nil {
			lead.end(ErrLockLost)
		}
	}()
	return lead, nil
}

// write writes rec, or withdraws it when rec.Value is "", on every node,
// as op. It returns nil once a quorum of nodes did so within the lock's
// validity, else an [*Error] wrapping ErrNotHeld.
func (lead *Leadership) write(ctx context.Context, op string, rec protocol.Record, announce bool) error {
	c, l := lead.e.c, lead.l
	if err := c.life.enter(); err != nil {
		return err
	}
	defer c.life.exit()
	keys, record := lead.e.keys(), ""
	if rec.Value != "" {
		record = rec.String()
	}
	r := c.start(detach(ctx), c.cfg.nodeTimeout, func(ctx context.Context, i int) error { // as a lock round's acquires
		return c.nodes[i].Elect(ctx, keys, rec.Token, record, announce)
	})
	ok, err := r.Await(ctx, c.cfg.quorum)
	if err == nil && (record == "" || c.cfg.clock.Now().Before(l.Until())) {
		return nil
	}
	e := c.newError(op, lead.e.name, ok, r, ErrNotHeld, err)
	if err == nil {
		e.Reason = "the lock's validity ran out"
	}
	return e
}

// refresh writes the current record again after an extension, so that it
// expires with the lock. A failure is left to the next extension.
func (lead *Leadership) refresh() {
	lead.mu.Lock()
	defer lead.mu.Unlock()
	_ = lead.write(context.WithoutCancel(lead.ctx), "campaign", lead.rec, false)
}

// end ends the leadership with cause, once: it cancels the context and
// closes Done together.
func (lead *Leadership) end(cause error) {
	lead.ended.Do(func() {
		lead.cancel(cause)
		close(lead.done)
	})
}

// valid ends the leadership if the lock's validity has run out, on the
// Client's clock, and reports whether it still holds.
func (lead *Leadership) valid() bool {
	if !lead.e.c.cfg.clock.Now().Before(lead.l.Until()) {
		lead.end(ErrLockLost)
	}
	select {
	case <-lead.done:
		return false
	default:
		return true
	}
}

// Term returns the leader's term: its lock's fence, strictly greater than
// the term of every earlier leader of the election.
func (lead *Leadership) Term() uint64 { return lead.l.Fence() }

// Until returns the end of the leader's current validity, on the Client's
// clock; the zero time once the leadership has ended by Resign.
func (lead *Leadership) Until() time.Time { return lead.l.Until() }

// Done returns a channel that is closed once the leadership can no longer
// be shown: its lock was lost, the Client was closed, or the leader
// resigned. The lock is lost when an extension failed for good, or when the
// validity ran out before one succeeded. Done first checks the validity on
// the Client's clock. So a leader paused beyond it finds the channel closed
// when it calls Done on waking.
func (lead *Leadership) Done() <-chan struct{} {
	lead.valid()
	return lead.done
}

// Context returns a context that is cancelled when Done is closed, with
// cause [ErrLockLost] (see context.Cause), or [ErrResigned] after Resign.
// It carries the values of Campaign's context, not its cancellation. Like
// Done, it checks the validity first.
func (lead *Leadership) Context() context.Context {
	lead.valid()
	return lead.ctx
}

// Proclaim publishes value in place of the leader's current one, in the
// same term. It returns nil once a quorum of nodes took it within the
// lock's validity. An empty value gives an error naming it. Otherwise the
// error wraps [ErrNotHeld]: the leadership has ended (then it sends
// nothing), or a quorum did not take the value. A node that took it shows
// it to [Election.Leader], and the next extensions write it to the others.
func (lead *Leadership) Proclaim(ctx context.Context, value string) error {
	if value == "" {
		return fmt.Errorf("redlock: election %q: Proclaim with an empty value", lead.e.name)
	}
	lead.mu.Lock()
	defer lead.mu.Unlock()
	if !lead.valid() {
		return &Error{Op: "proclaim", Key: lead.e.name, Quorum: lead.e.c.cfg.quorum, Reason: "the leadership has ended", sentinel: ErrNotHeld}
	}
	lead.rec.Rev++
	lead.rec.Value = value
	return lead.write(ctx, "proclaim", lead.rec, true)
}

// Resign steps down at once. It ends the leadership: Done is closed and the
// context cancelled with [ErrResigned]. It stops the extensions, releases
// the lock, which wakes the candidates waiting in Campaign, and withdraws
// the record. Like Unlock, it releases even when ctx is done, bounded by
// Options.NodeTimeout. It returns nil when the lock was released. The error
// wraps [ErrNotHeld] when the leadership was lost already, or Resign was
// called before.
func (lead *Leadership) Resign(ctx context.Context) error {
	lead.end(ErrResigned)
	lead.stopped.Do(func() { close(lead.stop) })
	<-lead.watched
	err := lead.l.Unlock(ctx)
	lead.mu.Lock()
	defer lead.mu.Unlock()
	if errors.Is(err, ErrNotHeld) && lead.rec.Value == "" {
		return err // resigned before
	}
	rec := lead.rec
	rec.Value = ""
	lead.rec.Value = ""
	wctx, cancel := context.WithTimeout(detach(ctx), 2*lead.e.c.cfg.nodeTimeout)
	defer cancel()
	_ = lead.write(wctx, "resign", rec, true)
	return err
}
