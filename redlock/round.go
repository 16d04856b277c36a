package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/alloc"
	"github.com/redquorum/redquorum/internal/node"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/waiting"
	"github.com/redquorum/redquorum/quorum"
)

// round is one attempt to take a lock: an acquire on every node, decided at
// a quorum, then with Options.Fencing the write-back of the fence. It lives
// for one attempt. A round that obtains the lock is kept by its [Lock] as
// the record of where the lock is held; a failed one is released and
// dropped.
type round struct {
	c     *Client
	keys  []string            // as the caller gave them
	acq   protocol.Acquire    // Keys: the keys as stored, then the plain state key
	cmd   protocol.Cmd        // acq as sent to every node on the plain state key; nil for the shortcut
	send  protocol.Cmd        // cmd with the script's source, for a Client's first rounds; else nil
	est   []protocol.Shortcut // per node, the new-deployment shortcut's request, or nil
	calls *quorum.Round       // the acquires
	// callTimeout bounds each acquire call: a release that waits for one
	// must allow for it.
	callTimeout time.Duration
	// replies holds, per node, what its acquire reported; written by the
	// node's call before it returns, read once calls.Result says it has.
	replies []protocol.AcquireReply
	// lat holds, per node, its acquire's latency, written like replies;
	// nil unless the Client has an Observer.
	lat   []time.Duration
	start time.Time
	until time.Time // validity, once obtained
	fence uint64

	// decided is set once the acquires have their quorum: acquires still
	// waiting for a busy node are then not sent (see node.Node.Acquire).
	decided   atomic.Bool
	decidedMu sync.Mutex
	decidedCh chan struct{} // made on demand by Decided, closed by decide

	// handedOver is the acquire round of the lock that Unlock handed over
	// to this round's caller, whose keys this round takes (see attempt), or
	// nil. Bit i of handedOverGranted is set when handedOver had been granted
	// on node i before this round's acquire was sent there. Only then does
	// this round's grant there mean that nothing is left of that lock on
	// the node (see tookHandover).
	handedOver        *quorum.Round
	handedOverGranted atomic.Uint64
	// after is the clean-up release of the caller's previous round, which
	// failed, or nil. This round's acquire on a node waits for that
	// release's answer there: sent before it, the acquire could overtake
	// it, find the key held by the previous round's token, and mark it, and
	// the release would then announce the key, waking this caller's waiter
	// into a round for nothing (TestWakeNotOnFailedRounds).
	after *quorum.Round

	// background is set for a round that nobody waits for (see topUp).
	background bool
	// early is set for a round made before the Client saw a node in
	// service (see acquireRound).
	early bool
	// report is, for the establishing round of the new-deployment
	// shortcut of a Client with an Observer, the record to which each
	// node's call reports its answer: the round decides at the quorum,
	// and the Observer hears of every node it establishes, late ones too.
	report *record

	// lock is the handle of the lock, built by newLock only once the round
	// has obtained it. It is allocated with the round, which it keeps
	// anyway as the record of where it is held: one allocation per attempt
	// instead of two.
	lock Lock

	// detached is the caller's context without its cancellation, for the
	// round's calls (see detachIn).
	detached detachedCtx
}

// newRound returns a round for keys with j's token (a new one when "").
// It sends est, the new-deployment shortcut's requests, when not nil, takes
// the keys of the lock handed over with token handover when not "", and
// tells the waiting strategy j.
func (c *Client) newRound(keys []string, ttl time.Duration, est []protocol.Shortcut, handover string, j waiting.Join, layer protocol.Layer) *round {
	r, replies := alloc.WithSlice[round, protocol.AcquireReply](len(c.nodes)) // one allocation for up to alloc.Small nodes
	r.c, r.keys, r.replies, r.est, r.early = c, keys, replies, est, !c.inService.Load()
	token := j.Token
	if token == "" {
		token = protocol.NewToken(c.cfg.owner)
	}
	r.acq = protocol.Acquire{Keys: append(c.storedKeys(keys, 1), c.stateKey), Token: token, TTL: ttl, Handover: handover, Join: j.On, Layer: layer}
	if est == nil {
		r.cmd = c.proto.AcquireCmd(r.acq) // built once for the plain nodes
		if !c.inService.Load() {
			// A Client's first rounds: the nodes may have just started
			// (a new deployment) and lack the script, whose NOSCRIPT
			// answer would cost a round trip. r.cmd stays as it is: the
			// release is derived from it.
			r.send = c.proto.WithSource(r.cmd)
		}
	}
	if c.obs != nil {
		r.lat = make([]time.Duration, len(c.nodes))
	}
	return r
}

// round makes one lock round (see newRound for est and j). When prev.Token
// is not "", it takes over the keys of prev, a lock handed over by Unlock.
// rec, when not nil, is the operation's record (see round.report). On
// failure it releases what the round took, and returns the round, for its
// replies, with the error. Callers are within c.life.enter.
func (c *Client) round(ctx context.Context, keys []string, ttl time.Duration, est []protocol.Shortcut, prev handover, after *quorum.Round, j waiting.Join, layer protocol.Layer, rec *record) (*round, error) {
	r := c.newRound(keys, ttl, est, prev.Token, j, layer)
	r.after = after
	if rec != nil && est != nil && est[0].Establish {
		r.report = rec
	}
	r.handedOver = prev.Acquire
	r.start = c.cfg.clock.Now()
	r.callTimeout = c.callTimeout()
	// The calls outlive ctx: a caller that cancels ctx once Lock has
	// returned must not cancel the acquires still on their way to the
	// slower nodes, which would leave the lock on fewer nodes and, where
	// a cancelled acquire is in doubt, a tombstone from its release.
	r.calls = c.start(detachIn(&r.detached, ctx), r.callTimeout, timed(r.lat, r.acquireOn))
	ok, err := r.calls.Await(ctx, c.cfg.quorum)
	if err == nil {
		r.decide()
	}
	last := r.calls
	validity := clock.Validity(ttl, c.cfg.clock.Now().Sub(r.start), c.cfg.drift)
	if err == nil && validity > 0 && c.cfg.fencing {
		last, ok, err = c.writeFence(ctx, r)
		validity = clock.Validity(ttl, c.cfg.clock.Now().Sub(r.start), c.cfg.drift)
	}
	if err == nil && validity > 0 {
		r.until = r.start.Add(validity)
		return r, nil
	}
	e := c.newError("lock", r.name(), ok, last, ErrNotObtained, err)
	if err == nil {
		e.Reason = fmt.Sprintf("the round took too long: validity %v after ttl %v and drift allowance %v", validity, ttl, clock.Drift(ttl, c.cfg.drift))
	}
	e.cleanup = c.release(context.Background(), r, false, nil)
	return r, e
}

// start starts a round of calls, one per node, decided at timeout. Each
// call may go on reading its node's answer for the Client's linger after
// that: a call cut off at the timeout would close its connection mid-read,
// and the next call would dial, handshake and check a new one, which costs
// a node that is slow for a moment (an overloaded host) far more than the
// answer. The answer, late or not, is what a release waits for (see
// releaseLock). Rounds whose caller waits for every call use
// c.life.workers.Start instead.
func (c *Client) start(ctx context.Context, timeout time.Duration, fn func(ctx context.Context, node int) error) *quorum.Round {
	return c.life.workers.StartLinger(ctx, len(c.nodes), timeout, c.cfg.linger, fn)
}

// callTimeout bounds the node calls of an acquire round. It is the node
// timeout, or the new-deployment window if longer while this Client has
// never seen a node out of its restart guard. A new deployment is
// recognised only from every node's answer (see newDeployment), and a slow
// node's first answer includes its connection's set-up and check. A
// shorter wait may leave that node out, and the deployment then waits out
// its whole guard. A longer one gains nothing: guards begun further apart
// than the window are not taken for a new deployment. The caller waits
// that long only when every node that answered was guarded.
func (c *Client) callTimeout() time.Duration {
	if c.cfg.guard > 0 && !c.inService.Load() {
		return max(c.cfg.nodeTimeout, c.cfg.newDeploymentWindow)
	}
	return c.cfg.nodeTimeout
}

// acquireOn is node i's call of the round: its acquire, and the per-node
// outcome that the reply means, reported to r.report if set.
func (r *round) acquireOn(ctx context.Context, i int) error {
	err := r.acquire(ctx, i)
	if r.report != nil {
		r.report.answer(i, err, establishRound)
	}
	return err
}

// acquire is acquireOn's call.
func (r *round) acquire(ctx context.Context, i int) error {
	a, cmd := &r.acq, r.cmd
	if r.send != nil {
		cmd = r.send
	}
	if r.est != nil {
		b := r.acq
		b.Shortcut = r.est[i]
		a = &b
	}
	var d node.Decider = r
	if r.background {
		d = nil // nobody waits for it: sent even to a busy node
	}
	if r.after != nil && !answered(ctx, r.after, i) {
		return node.ErrNotSent // the previous round's clean-up has not answered here yet
	}
	if r.handedOver != nil {
		// Wait for the handed-over lock's acquire to answer here: sent
		// before, this one could overtake it (see tookHandover). Not sent when
		// the round's time runs out first.
		if !answered(ctx, r.handedOver, i) {
			return node.ErrNotSent
		}
		if res, _ := r.handedOver.Result(i); granted(res) && i < 64 {
			r.handedOverGranted.Or(1 << i)
		}
	}
	rep, err := r.c.nodes[i].Acquire(ctx, a, cmd, d)
	if err != nil {
		return err
	}
	r.replies[i] = rep
	if rep.Kind != protocol.Guarded && !r.c.inService.Load() {
		r.c.inService.Store(true)
	}
	switch rep.Kind {
	case protocol.Taken:
		return ErrTaken
	case protocol.Guarded:
		return &guardError{left: rep.Wait}
	case protocol.Gone:
		return errGone
	case protocol.Mismatch:
		return &limitError{limit: rep.Limit}
	case protocol.WriterWaits:
		return errWriterWaits
	}
	if rep.Fence < 0 {
		return ErrFenceUnknown
	}
	return nil
}

// answered waits until rd's call to node i has returned, and reports
// whether it has; false if ctx ends first.
func answered(ctx context.Context, rd *quorum.Round, i int) bool {
	if _, done := rd.Result(i); done {
		return true
	}
	select {
	case <-rd.Done(i):
		return true
	case <-ctx.Done():
		return false
	}
}

// decide marks the acquires as decided with their quorum.
func (r *round) decide() {
	r.decidedMu.Lock()
	defer r.decidedMu.Unlock()
	r.decided.Store(true)
	if r.decidedCh != nil {
		close(r.decidedCh)
	}
}

// IsDecided reports whether the acquires have their quorum.
func (r *round) IsDecided() bool { return r.decided.Load() }

// Decided returns a channel closed once the acquires have their quorum.
func (r *round) Decided() <-chan struct{} {
	r.decidedMu.Lock()
	defer r.decidedMu.Unlock()
	if r.decidedCh == nil {
		r.decidedCh = make(chan struct{})
		if r.decided.Load() {
			close(r.decidedCh)
		}
	}
	return r.decidedCh
}

// writeFence is the second phase of a fenced lock, after a quorum of nodes
// with known fence counters granted r. It takes T = 1 + the largest counter
// those nodes reported, and raises the counter to T on every node that had
// granted r, guarded by r's token. It returns the write-back round and how
// many acknowledged it. [Lock.Fence] argues why fences increase.
func (c *Client) writeFence(ctx context.Context, r *round) (*quorum.Round, int, error) {
	var hi int64
	granted := make([]bool, len(c.nodes))
	for i := range c.nodes {
		res, done := r.calls.Result(i)
		if !done || (res != nil && !errors.Is(res, ErrFenceUnknown)) {
			continue
		}
		granted[i] = true
		hi = max(hi, r.replies[i].Fence)
	}
	r.fence = uint64(hi) + 1
	w := c.start(detach(ctx), c.cfg.nodeTimeout, func(ctx context.Context, i int) error { // as the acquires
		if !granted[i] {
			return errSkipped
		}
		return c.nodes[i].Fence(ctx, r.acq.Keys, r.acq.Token, hi+1)
	})
	ok, err := w.Await(ctx, c.cfg.quorum)
	return w, ok, err
}

// freeIn returns how long until a quorum of nodes could grant the keys of
// r, a failed round, from the holder TTLs its nodes reported, or 0 when
// unknown.
func (r *round) freeIn() time.Duration {
	var ttls []time.Duration
	for i := range r.replies {
		res, done := r.calls.Result(i)
		switch {
		case !done:
		case res == nil:
			ttls = append(ttls, 0)
		case (errors.Is(res, ErrTaken) || errors.Is(res, ErrGuarded)) && r.replies[i].Wait > 0:
			ttls = append(ttls, r.replies[i].Wait)
		}
	}
	q := r.c.cfg.quorum
	if len(ttls) < q {
		return 0
	}
	slices.Sort(ttls)
	return ttls[q-1]
}
