package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/alloc"
	"github.com/redquorum/redquorum/internal/hashslot"
	"github.com/redquorum/redquorum/internal/retry"
	"github.com/redquorum/redquorum/internal/scripts"
	"github.com/redquorum/redquorum/quorum"
)

// Client locks keys on N independent Redis masters. It is safe for
// concurrent use. Its requests to the nodes that outlive the call that
// started them (the answer of a slow node after the quorum was decided, the
// release that must follow it) belong to the Client: [Client.Close] waits for
// them.
type Client struct {
	nodes []redis.UniversalClient
	addrs []string // one display name per node
	cfg   config

	slotted []bool // per node: a Redis Cluster, whose state key is one per hash slot
	sharded bool   // some node is a Cluster or a Ring: a lock's keys must share a hash tag or slot
	// The acquire script's constant arguments, boxed once: an interface
	// holding a string or a large integer costs an allocation per call.
	guardArg, fenceArg, emptyArg any    // emptyArg: "" (no state to establish, no lock handed over)
	stateKey                     string // Options.KeyPrefix + reservedKey
	lastTTL                      atomic.Pointer[boxedTTL]

	// inService is set once a node answered an acquire out of its guard:
	// from then on this Client never takes the nodes for a new deployment.
	inService atomic.Bool

	mu     sync.RWMutex // guards closed; held for reading while background work is added to bg
	closed bool
	bg     sync.WaitGroup
	// The goroutines that make the rounds' calls to the nodes, kept between
	// rounds; stopped by Close once bg is done.
	workers *quorum.Workers

	// slots bounds each node's requests in flight to its connection pool
	// (see Client.enter); nil for a node without a limit.
	slots []chan struct{}

	procs []scripts.Processor // per node, the batcher (batch.go) that sends its acquires and releases, boxed once

	redeliveries []redelivery  // per node, the releases in doubt that are being retried (redeliver.go)
	closeCh      chan struct{} // closed when Close begins

	turns *turns // local queue per key (queue.go)
	wake  waker  // pub/sub listeners that end retry waits early (wake.go)
}

// New returns a Client that locks on the given nodes: independent Redis
// masters (not replicas of one another), each given as a go-redis client,
// best built with [NodeOptions] or [NewNodes]. opts may be nil.
//
// New checks nodes and opts and returns an error naming the offending value:
// no nodes, a nil node, the same client or address twice, or an option out
// of range. It logs a warning for each node client whose settings break the
// per-node timeout or retry requests (see [NodeOptions]). The caller keeps
// ownership of the node clients.
func New(nodes []redis.UniversalClient, opts *Options) (*Client, error) {
	if len(nodes) == 0 {
		return nil, errors.New("redlock: no nodes")
	}
	cfg, err := opts.config(len(nodes))
	if err != nil {
		return nil, err
	}
	c := &Client{nodes: nodes, addrs: make([]string, len(nodes)), cfg: cfg, slotted: make([]bool, len(nodes)), slots: make([]chan struct{}, len(nodes)), procs: make([]scripts.Processor, len(nodes)),
		guardArg: cfg.guard.Milliseconds(), fenceArg: "0", emptyArg: "", turns: newTurns(), stateKey: cfg.prefix + reservedKey, workers: quorum.NewWorkers(),
		redeliveries: make([]redelivery, len(nodes)), closeCh: make(chan struct{})}
	if cfg.fencing {
		c.fenceArg = "1"
	}
	seenAddr := map[string]int{}
	sharded := 0 // Cluster and Ring nodes
	for i, n := range nodes {
		if n == nil {
			return nil, fmt.Errorf("redlock: nodes[%d] is nil", i)
		}
		for j := range i {
			if nodes[j] == n {
				return nil, fmt.Errorf("redlock: nodes[%d] is the same client as nodes[%d]", i, j)
			}
		}
		switch n := n.(type) {
		case *redis.ClusterClient:
			c.slotted[i], c.sharded = true, true
			sharded++
		case *redis.Ring:
			c.sharded = true
			sharded++
		case *redis.Client:
			if size := n.Options().PoolSize; size > 0 {
				c.slots[i] = make(chan struct{}, size)
			}
		}
		c.procs[i] = &batchedNode{b: new(batcher), node: n}
		addrs, problems := nodeInfo(n, cfg.nodeTimeout)
		for _, a := range addrs {
			if j, dup := seenAddr[a]; dup {
				return nil, fmt.Errorf("redlock: nodes[%d] and nodes[%d] both address %s: the nodes must be independent masters", i, j, a)
			}
			seenAddr[a] = i
		}
		c.addrs[i] = fmt.Sprintf("node %d", i)
		if len(addrs) > 0 {
			c.addrs[i] = addrs[0]
		}
		for _, p := range problems {
			cfg.log.Warn("redlock: node client configured against the lock algorithm", "node", i, "addr", c.addrs[i], "problem", p)
		}
	}
	if slotted := countTrue(c.slotted); cfg.guard > 0 && len(nodes)-slotted < cfg.quorum {
		cfg.log.Warn("redlock: a quorum of the nodes are Redis Clusters, whose restart guard is per hash slot: the first lock on a slot that this deployment has not used yet waits Options.RestartGuard (only a new Client's first slot is taken at once); give lock keys few hash tags, such as {locks}:order:42",
			"clusters", slotted, "nodes", len(nodes), "restart_guard", cfg.guard)
	}
	if plain := len(nodes) - sharded; cfg.fencing && cfg.guard > 0 && plain < cfg.quorum {
		return nil, fmt.Errorf("redlock: Options.Fencing needs at least %d plain masters among the %d nodes, and %d are a Redis Cluster or Ring: there the fence counters are kept per hash slot or shard, one that the deployment has not used yet has an unknown counter, and fenced locks on its keys would fail with ErrFenceUnknown", cfg.quorum, len(nodes), sharded)
	}
	return c, nil
}

// countTrue returns how many of bs are true.
func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// Close waits for the Client's outstanding background requests (late node
// answers and the releases that follow them), sends once more, at once, the
// releases that nodes have not answered yet and that the Client retries in
// the background (see [Client.TryLock]), and makes every later operation
// return [ErrClosed]. It also stops the goroutines that the Client keeps
// between lock rounds to call the nodes (at most one per call that ran at
// once): close every Client you no longer use. Unlock the locks you hold
// before Close. Close does not close the node clients. It is safe to call
// more than once.
func (c *Client) Close() error {
	c.mu.Lock()
	if !c.closed {
		close(c.closeCh) // redeliver.go: one last attempt for the releases in doubt
	}
	c.closed = true
	c.mu.Unlock()
	c.turns.close() // queue.go: waiters return ErrClosed
	c.wake.close()  // wake.go: stops and waits for the pub/sub listeners
	c.bg.Wait()
	c.workers.Close()
	return nil
}

// track hands a round's outstanding calls to the Client, which waits for them
// in Close. Callers hold c.mu for reading and have checked c.closed.
func (c *Client) track(r *quorum.Round) { r.Own(&c.bg) }

// TryLock makes exactly one attempt to lock key for ttl on a quorum of nodes
// and returns the held [Lock], or an error.
//
// On failure every node that granted the lock, or whose answer did not come,
// is sent a token-guarded release, after its answer (or its timeout) for
// nodes still outstanding. A release that gets no answer (the node is
// down or cut off) is sent again in the background until the node answers
// or the TTL has passed; the answer deletes the key, or, where the key is
// missing, leaves a tombstone for the TTL that refuses this round's SET if
// the network still delivers it (a partition that holds packets and heals).
// A SET delivered later than that, or a node that stays unreachable for the
// TTL, leaves a key that nobody holds until its TTL passes: that costs
// availability, never safety. The error is an [*Error] that wraps
// [ErrNotObtained] (and ctx.Err() when ctx ended the attempt); bad arguments
// (empty key, ttl that is not positive, too small to survive the drift
// allowance, or above Options.RestartGuard) give a plain error naming the
// value.
//
// The lock's validity is ttl minus the round's duration minus the drift
// allowance; ttl is used in whole milliseconds. TryLock does not take part
// in the local queue of [Client.Lock]: it makes its round at once.
func (c *Client) TryLock(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	return c.tryLock(ctx, oneKey(key), ttl)
}

// oneKey returns the keys of a lock on key, with room for the acquire's
// state key after it (see Client.round).
func oneKey(key string) []string {
	keys := make([]string, 1, 2)
	keys[0] = key
	return keys
}

// TryLockMany is [Client.TryLock] for a lock over several keys, taken
// together: each node grants all of them or none, in one script, and the
// quorum is counted over nodes. [Lock.Unlock] and [Lock.Extend] act on all
// the keys. Bad input (no keys, an empty key, a key given twice, or, when a
// node is a Redis Cluster or Ring, keys with different hash tags) gives an
// error naming it.
//
// On a node that is a Redis Cluster, a script may only touch keys of one
// hash slot (on a Ring, of one shard): give every key of one lock the same
// hash tag, for example "{order:42}:stock" and "{order:42}:payment".
func (c *Client) TryLockMany(ctx context.Context, keys []string, ttl time.Duration) (*Lock, error) {
	return c.tryLock(ctx, slices.Clone(keys), ttl)
}

// tryLock is TryLockMany on keys that the Lock may keep.
func (c *Client) tryLock(ctx context.Context, keys []string, ttl time.Duration) (*Lock, error) {
	ttl, err := c.checkArgs(keys, ttl)
	if err != nil {
		return nil, err
	}
	l, _, err := c.attempt(ctx, keys, ttl, nil)
	return l, err
}

// Lock is like [Client.TryLock] but retries until it holds the lock, ctx is
// done, or, when ctx has no deadline, Options.MaxWait has passed. Between
// rounds it waits a random delay between Options.MinRetryDelay and a cap
// that doubles up to Options.MaxRetryDelay, or less when the nodes report
// that the current holder's keys expire sooner.
//
// On failure it returns the [*Error] of the last round; errors.Is finds
// [ErrNotObtained], and ctx.Err() when ctx ended the wait. Lock is safe for
// concurrent use; concurrent callers of one Client compete like separate
// clients.
func (c *Client) Lock(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	return c.lock(ctx, oneKey(key), ttl)
}

// LockMany is [Client.Lock] for several keys taken together, as in
// [Client.TryLockMany].
func (c *Client) LockMany(ctx context.Context, keys []string, ttl time.Duration) (*Lock, error) {
	return c.lock(ctx, slices.Clone(keys), ttl)
}

// lock is LockMany on keys that the Lock may keep.
func (c *Client) lock(ctx context.Context, keys []string, ttl time.Duration) (*Lock, error) {
	ttl, err := c.checkArgs(keys, ttl)
	if err != nil {
		return nil, err
	}
	// giveUp fires after MaxWait when ctx has no deadline. Its timer is
	// made only when Lock has to wait (an allocation saved per call).
	var giveUp <-chan time.Time
	_, hasDeadline := ctx.Deadline()
	giveUpAt := c.cfg.clock.Now().Add(c.cfg.maxWait)
	giveUpCh := func() <-chan time.Time {
		if giveUp == nil && !hasDeadline {
			giveUp = c.cfg.clock.After(giveUpAt.Sub(c.cfg.clock.Now()))
		}
		return giveUp
	}
	// Local queue (queue.go): wait for this key's turn in this Client.
	name := strings.Join(keys, ", ")
	turn, err := c.turns.wait(ctx, strings.Join(keys, "\x00"), giveUpCh, c)
	if err != nil {
		return nil, c.queueError(name, err)
	}
	obtained := false
	defer func() {
		if !obtained {
			c.turns.leave(turn)
		}
	}()
	// The previous holder of this Client may have handed its lock over
	// (Lock.Unlock): the first round then takes its keys as free.
	prev := turn.inherit
	for attempt := 0; ; attempt++ {
		roundStart := c.cfg.clock.Now()
		l, hint, err := c.attempt(ctx, keys, ttl, prev)
		prev = nil // released by attempt, unless the Client was closed
		if err == nil {
			obtained = true
			c.turns.held(turn, l) // keeps the turn until Unlock or Until
			return l, nil
		}
		var e *Error
		if !errors.As(err, &e) {
			return nil, err // closed
		}
		if cerr := ctx.Err(); cerr != nil {
			// The context ended during the round, perhaps after its decision.
			if !errors.Is(e, cerr) {
				e.cause = errors.Join(e.cause, cerr)
			}
			return nil, e
		}
		wait := retry.Delay(attempt, c.cfg.minRetry, c.cfg.maxRet)
		if hint > 0 && hint < wait {
			// Come back when the holder's keys expire, spread a little so
			// that waiters do not arrive in step.
			wait = hint + retry.Jitter(min(c.cfg.minRetry, hint/4))
		}
		rkey := c.cfg.prefix + keys[0]
		wake := c.wakeOn(rkey) // wake.go: closed when a node announces the key's release
		stop := true
		select {
		case <-c.cfg.clock.After(wait):
			stop = false
		case <-wake:
			wakeJitter(c, c.cfg.clock.Now().Sub(roundStart))
			stop = false
		case <-ctx.Done():
			e.cause = errors.Join(e.cause, ctx.Err())
		case <-giveUpCh():
			e.Reason = joinReason(e.Reason, fmt.Sprintf("gave up after Options.MaxWait %v", c.cfg.maxWait))
		}
		c.wakeDone(rkey, wake)
		if stop {
			return nil, e
		}
	}
}

func joinReason(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// reservedKey is the name, after Options.KeyPrefix, of each node's state
// (see [ErrGuarded]); lock keys must not start with it.
const reservedKey = "redquorum:node"

// checkArgs validates the keys and a ttl and returns the ttl cut to whole
// milliseconds, which is what the nodes apply.
func (c *Client) checkArgs(keys []string, ttl time.Duration) (time.Duration, error) {
	if len(keys) == 0 {
		return 0, errors.New("redlock: no keys")
	}
	for i, k := range keys {
		switch {
		case k == "":
			if len(keys) == 1 {
				return 0, errors.New("redlock: empty key")
			}
			return 0, fmt.Errorf("redlock: keys[%d] is empty", i)
		case strings.HasPrefix(k, reservedKey):
			return 0, fmt.Errorf("redlock: key %q starts with %q, which is reserved for the nodes' state", k, reservedKey)
		}
		for j := range i {
			if keys[j] == k {
				return 0, fmt.Errorf("redlock: keys[%d] %q is the same as keys[%d]", i, k, j)
			}
		}
		if c.sharded && i > 0 && hashslot.Hashed(c.cfg.prefix+k) != hashslot.Hashed(c.cfg.prefix+keys[0]) {
			return 0, fmt.Errorf("redlock: keys[%d] %q and keys[0] %q have different hash tags: a node is a Redis Cluster or Ring, so every key of one lock needs the same hash tag, as in {order:42}:a and {order:42}:b", i, k, keys[0])
		}
	}
	return c.checkTTL(ttl)
}

// checkTTL validates a ttl and returns it cut to whole milliseconds.
func (c *Client) checkTTL(ttl time.Duration) (time.Duration, error) {
	ms := ttl.Truncate(time.Millisecond)
	if ttl > 0 && ms == 0 {
		return 0, fmt.Errorf("redlock: ttl %v is below the nodes' 1ms resolution", ttl)
	}
	if err := clock.CheckTTL(ms, c.cfg.drift); err != nil {
		return 0, fmt.Errorf("redlock: %w", err)
	}
	if c.cfg.guard > 0 && ms > c.cfg.guard {
		return 0, fmt.Errorf("redlock: ttl %v exceeds Options.RestartGuard %v: a node that lost its data could grant the lock again while it is held", ttl, c.cfg.guard)
	}
	return ms, nil
}

// nodeReply is what one node's acquire reported beyond granted or not.
type nodeReply struct {
	ttl   int64  // ErrTaken: the holder's remaining TTL in ms; ErrGuarded: ms left in the guard
	fence int64  // granted with fencing: the node's fence counter, -1 when unknown
	state string // ErrGuarded: the id of the node's guarded state
}

// acquire runs the acquire script for l on node i, with the id of a guarded
// state to establish ("" for none), and records what it reported.
func (c *Client) acquire(ctx context.Context, l *Lock, i int, establish string, ttlMS any) error {
	est := c.emptyArg
	if establish != "" {
		est = establish
	}
	if err := c.enter(ctx, i, l); err != nil {
		return err
	}
	defer c.exit(i)
	var v any
	var err error
	if l.acqArgs != nil && establish == "" && !c.slotted[i] {
		v, err = scripts.Run(ctx, c.procs[i], l.acqArgs) // the round's shared arguments
	} else {
		v, err = scripts.Acquire.Run(ctx, c.nodes[i], c.scriptKeys(l, i), l.token, ttlMS, c.guardArg, est, c.fenceArg, l.prevArg).Result()
	}
	if err != nil {
		return err
	}
	rep := &l.replies[i]
	if !c.inService.Load() {
		if a, ok := v.([]any); !ok || len(a) != 3 {
			c.inService.Store(true) // not the guard's reply
		}
	}
	switch v := v.(type) {
	case int64:
		if v == -3 {
			return errGone
		}
		if v != 0 {
			rep.ttl = v
			return ErrTaken
		}
		return nil
	case []any:
		if len(v) >= 2 {
			code, _ := v[0].(int64)
			n, _ := v[1].(int64)
			switch {
			case code == 0:
				rep.fence = n
				if n < 0 {
					return ErrFenceUnknown
				}
				return nil
			case code == -2 && len(v) == 3:
				rep.ttl = n
				rep.state, _ = v[2].(string)
				return ErrGuarded
			}
		}
	}
	return fmt.Errorf("redlock: unexpected reply %v from the acquire script", v)
}

// enter takes one of node i's request slots, which keep the requests in
// flight to a node within its connection pool. Beyond the pool, requests
// wait for a connection and a slow node's wait outlasts the node timeout: the
// request is abandoned mid-read, its connection closed and redialled, and
// every later request pays for it. So a request waits for a slot instead,
// and an acquire (l not nil) waits only while its round still needs it: once
// the round has its quorum, or its time runs out, it returns errNotSent
// without having been sent. An acquire not sent cannot have set the keys, so
// leaving it out never weakens the lock; it only spares a slow or saturated
// node work whose answer would come after the decision. An acquire that
// finds a free slot is always sent, so that a healthy node holds the lock as
// well (and an Extend survives the loss of a node). Other requests (l nil)
// wait until ctx is done.
func (c *Client) enter(ctx context.Context, i int, l *Lock) error {
	s := c.slots[i]
	if s == nil {
		return nil
	}
	select {
	case s <- struct{}{}:
		return nil
	default:
	}
	var decided <-chan struct{}
	if l != nil {
		decided = l.decidedChan()
	}
	select {
	case s <- struct{}{}:
		if l != nil && l.decided.Load() {
			<-s
			return errNotSent
		}
		return nil
	case <-decided:
		return errNotSent
	case <-ctx.Done():
		if l != nil {
			return errNotSent
		}
		return ctx.Err()
	}
}

// exit gives back the slot taken by enter.
func (c *Client) exit(i int) {
	if s := c.slots[i]; s != nil {
		<-s
	}
}

// scriptKeys returns the KEYS of l's acquire, extend and fence scripts on node i:
// the lock keys, then the node's state. The first key routes the script on
// a Cluster or Ring node; on a Ring, each shard has its own state key.
func (c *Client) scriptKeys(l *Lock, i int) []string {
	if !c.slotted[i] {
		return l.akeys
	}
	k := make([]string, 0, 1+len(l.rkeys))
	k = append(k, l.rkeys...)
	return append(k, c.cfg.prefix+reservedKey+":{"+hashslot.Tag(hashslot.Slot(l.rkeys[0]))+"}")
}

// attempt makes one lock round (two with fencing), taking over the keys of
// prev when not nil (see Client.round) and then releasing what is left of
// prev. On a closed Client it sends nothing: prev's keys then expire. On failure it also
// returns how long until the current holder's keys have expired on enough
// nodes for a quorum, or 0 when unknown.
func (c *Client) attempt(ctx context.Context, keys []string, ttl time.Duration, prev *Lock) (*Lock, time.Duration, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return nil, 0, ErrClosed
	}
	l, hint, err := c.round(ctx, keys, ttl, nil, prev)
	ids, waited := c.newDeployment(l, err)
	if waited {
		// Report the answers newDeployment waited for.
		var e *Error
		if errors.As(err, &e) {
			c.fillNodes(e, l.acq, nil)
		}
	}
	if ids != nil && ctx.Err() == nil {
		// Every node is guarded at once: a new deployment. End the guard on
		// all of them, each only if it still has the state we saw.
		l, hint, err = c.round(ctx, keys, ttl, ids, prev)
	}
	if prev != nil {
		if err == nil {
			c.releaseHandedOver(prev, l)
		} else {
			c.releaseHandedOver(prev, nil)
		}
	}
	if err != nil {
		return nil, hint, err
	}
	return l, 0, nil
}

// newDeploymentWindow bounds how far apart in time the nodes' restart
// guards may have begun for a round to take them for a brand-new deployment
// (see [ErrGuarded]). Nodes that came up further apart, as in a rolling
// restart, serve locks only once their guards have run out.
var newDeploymentWindow = 5 * time.Second // a variable for the tests' negative control

// newDeployment returns the ids of the nodes' guarded states when a failed
// round l found a new deployment: this Client has never seen a node out of
// its guard, and every node is guarded, its guard begun within
// newDeploymentWindow. Otherwise it returns nil. When every node that
// answered was guarded, it waits for the others' answers (at most the node
// timeout) and reports that it waited.
func (c *Client) newDeployment(l *Lock, err error) (ids []string, waited bool) {
	if err == nil || l == nil || c.cfg.guard == 0 || l.acq == nil || c.inService.Load() {
		return nil, false
	}
	for i := range c.nodes {
		if res, done := l.acq.Result(i); done && !errors.Is(res, ErrGuarded) {
			return nil, false
		}
	}
	young := (c.cfg.guard - newDeploymentWindow).Milliseconds()
	ids = make([]string, len(c.nodes))
	for i := range c.nodes {
		<-l.acq.Done(i)
		if res, _ := l.acq.Result(i); !errors.Is(res, ErrGuarded) || l.replies[i].ttl < young {
			ids = nil
		} else if ids != nil {
			ids[i] = l.replies[i].state
		}
	}
	return ids, true
}

// round makes one lock round, establishing the guarded states given in
// establish (one per node) on the way, and taking over the keys of prev, a
// lock of this Client handed over by Unlock, when not nil. Callers hold c.mu
// for reading. On failure it returns the Lock it tried, released, for its
// replies.
func (c *Client) round(ctx context.Context, keys []string, ttl time.Duration, establish []string, prev *Lock) (*Lock, time.Duration, error) {
	n := len(c.nodes)
	l, replies := alloc.WithSlice[Lock, nodeReply](n) // one allocation for up to alloc.Small nodes
	l.replies = replies
	l.c, l.keys, l.token = c, keys, retry.Token()
	l.prevArg = c.emptyArg
	if prev != nil {
		l.prevArg = prev.token
	}
	if c.cfg.prefix == "" && cap(keys) > len(keys) {
		l.rkeys = keys // ours (oneKey or a clone), as stored, with room for the state key
	} else {
		l.rkeys = make([]string, len(keys), len(keys)+1)
		for i, k := range keys {
			l.rkeys[i] = c.cfg.prefix + k
		}
	}
	l.akeys = append(l.rkeys, c.stateKey) // in rkeys' spare capacity
	ttlMS := c.boxTTL(ttl)                // boxed once for all nodes
	l.ttlArg = ttlMS
	if establish == nil {
		// By SHA, with the arguments built once for the nodes that are not
		// a Cluster (see Client.acquire).
		l.acqArgs = scripts.Args(scripts.Acquire, l.akeys, l.token, ttlMS, c.guardArg, c.emptyArg, c.fenceArg, l.prevArg)
	}
	start := c.cfg.clock.Now()
	r := c.workers.Start(ctx, n, c.cfg.nodeTimeout, func(ctx context.Context, i int) error {
		var est string
		if establish != nil {
			est = establish[i]
		}
		return c.acquire(ctx, l, i, est, ttlMS)
	})
	c.track(r)
	l.acq = r
	ok, qerr := r.Await(ctx, c.cfg.quorum)
	if qerr == nil {
		l.decide() // acquires still waiting for a busy node are not sent
	}
	validity := clock.Validity(ttl, c.cfg.clock.Now().Sub(start), c.cfg.drift)
	if qerr == nil && validity > 0 && c.cfg.fencing {
		r, ok, qerr = c.fence(ctx, l)
		validity = clock.Validity(ttl, c.cfg.clock.Now().Sub(start), c.cfg.drift)
	}
	if qerr == nil && validity > 0 {
		l.until = start.Add(validity)
		return l, 0, nil
	}
	e := c.newError("lock", l.name(), ok, r, ErrNotObtained, qerr)
	if qerr == nil {
		e.Reason = fmt.Sprintf("the round took too long: validity %v after ttl %v and drift allowance %v", validity, ttl, clock.Drift(ttl, c.cfg.drift))
	}
	c.releaseAsync(l)
	return l, c.freeIn(l), e
}

// boxedTTL is a ttl in ms boxed for the scripts' arguments.
type boxedTTL struct {
	ms  int64
	arg any
}

// boxTTL returns ttl in ms as a script argument, the same box as the last
// round's when the ttl is the same (boxing an int64 above 255 costs an
// allocation).
func (c *Client) boxTTL(ttl time.Duration) any {
	ms := ttl.Milliseconds()
	if b := c.lastTTL.Load(); b != nil && b.ms == ms {
		return b.arg
	}
	b := &boxedTTL{ms, ms}
	c.lastTTL.Store(b)
	return b.arg
}

// fence is the second phase of a fenced lock, after a quorum of nodes with
// known fence counters granted l: it takes T = 1 + the largest counter
// those nodes reported and raises the counter to T, guarded by l's token, on
// every node that had granted l. It returns the write-back round and whether
// a quorum acknowledged it. Why this makes fences increase is argued at
// [Lock.Fence].
func (c *Client) fence(ctx context.Context, l *Lock) (*quorum.Round, int, error) {
	var hi int64
	granted := make([]bool, len(c.nodes))
	for i := range c.nodes {
		res, done := l.acq.Result(i)
		if !done || (res != nil && !errors.Is(res, ErrFenceUnknown)) {
			continue
		}
		granted[i] = true
		hi = max(hi, l.replies[i].fence)
	}
	l.fence = uint64(hi) + 1
	r := c.workers.Start(ctx, len(c.nodes), c.cfg.nodeTimeout, func(ctx context.Context, i int) error {
		if !granted[i] {
			return errSkipped
		}
		if err := c.enter(ctx, i, nil); err != nil {
			return err
		}
		defer c.exit(i)
		return guarded(scripts.Fence.Run(ctx, c.nodes[i], c.scriptKeys(l, i), l.token, hi+1).Int64())
	})
	c.track(r)
	ok, err := r.Await(ctx, c.cfg.quorum)
	return r, ok, err
}

// freeIn returns how long until a quorum of nodes could grant the key, from
// the holder TTLs reported by a failed round, or 0 when unknown.
func (c *Client) freeIn(l *Lock) time.Duration {
	var ttls []int64
	for i := range c.nodes {
		res, done := l.acq.Result(i)
		switch {
		case !done:
		case res == nil:
			ttls = append(ttls, 0)
		case (errors.Is(res, ErrTaken) || errors.Is(res, ErrGuarded)) && l.replies[i].ttl > 0:
			ttls = append(ttls, l.replies[i].ttl)
		}
	}
	if len(ttls) < c.cfg.quorum {
		return 0
	}
	sort.Slice(ttls, func(a, b int) bool { return ttls[a] < ttls[b] })
	return time.Duration(ttls[c.cfg.quorum-1]) * time.Millisecond
}

// newError builds the Error of an operation from its round.
func (c *Client) newError(op, key string, ok int, r *quorum.Round, sentinel, cause error) *Error {
	e := &Error{Op: op, Key: key, Quorum: c.cfg.quorum, OK: ok, Nodes: make([]NodeResult, len(c.nodes)), sentinel: sentinel, cause: cause}
	c.fillNodes(e, r, cause)
	return e
}

// fillNodes sets each node's address and outcome in r on e.
func (c *Client) fillNodes(e *Error, r *quorum.Round, cause error) {
	for i := range c.nodes {
		e.Nodes[i].Addr = c.addrs[i]
		res, done := r.Result(i)
		switch {
		case done:
			e.Nodes[i].Err = res
		case errors.Is(cause, quorum.ErrTimeout):
			e.Nodes[i].Err = quorum.ErrTimeout
		default:
			e.Nodes[i].Err = errPending
		}
	}
}

// release sends the token-guarded release of l to every node in parallel,
// each after that node's acquire has answered, skipping nodes whose acquire
// said the key was taken. It returns the round without waiting for it; the
// round belongs to the Client.
func (c *Client) release(ctx context.Context, l *Lock) *quorum.Round {
	return c.releaseExcept(ctx, l, nil)
}

// releaseHandedOver releases prev, a lock that Unlock handed over to a
// waiter of this Client, once the waiter's first round, next, has run: on
// the nodes where next was granted the keys hold next's token and there is
// nothing left of prev; on the others prev's keys may remain. next is nil
// when that round failed: prev is then released everywhere. Callers hold
// c.mu for reading.
func (c *Client) releaseHandedOver(prev, next *Lock) {
	c.releaseExcept(context.Background(), prev, next)
}

// releaseExcept is release, skipping the nodes where after, a later lock on
// the same keys that took over l's, was granted.
func (c *Client) releaseExcept(ctx context.Context, l *Lock, after *Lock) *quorum.Round {
	// Unlock (l.released), not the clean-up of a failed round, announces
	// the release to waiting clients (wake.go); so does nothing whose keys
	// after holds: the key is not free.
	announce := "0"
	if l.released && after == nil {
		announce = "1"
	}
	// By SHA, built once per round, from the acquire's boxed keys, token and
	// ttl when it has them. The ttl makes the script leave a tombstone where
	// the key is missing, against a late SET of this token (release.lua).
	var args []any
	if l.acqArgs != nil {
		args = scripts.Sub(scripts.Release, l.acqArgs, len(l.rkeys), scripts.Argv(l.acqArgs, 1), announce, scripts.Argv(l.acqArgs, 2))
	} else {
		args = scripts.Args(scripts.Release, l.rkeys, l.token, announce, l.ttlArg)
	}
	// The wait for an outstanding acquire is bounded by its own timeout,
	// hence the round's two node timeouts; a release sent after such a wait
	// has at least one node timeout of them left. When every acquire has
	// answered (the usual Unlock) there is nothing to wait for and the
	// round's timeout is the node timeout.
	timeout := c.cfg.nodeTimeout
	if !l.acq.AllDone() {
		timeout += c.cfg.nodeTimeout
	}
	if after != nil && !after.acq.AllDone() {
		timeout += c.cfg.nodeTimeout
	}
	if _, ok := ctx.Deadline(); ok || ctx.Done() != nil {
		ctx = context.WithoutCancel(ctx) // a release outlives the caller's ctx
	}
	r := c.workers.Start(ctx, len(c.nodes), timeout, func(ctx context.Context, i int) error {
		<-l.acq.Done(i)
		if res, _ := l.acq.Result(i); refused(res) {
			return errSkipped
		}
		if after != nil {
			<-after.acq.Done(i)
			if res, _ := after.acq.Result(i); res == nil || errors.Is(res, ErrFenceUnknown) {
				return errSkipped // the keys hold after's token
			}
		}
		if err := c.enter(ctx, i, nil); err != nil {
			c.cfg.log.Debug("redlock: release not sent: the node stayed busy", "addr", c.addrs[i], "key", l.name(), "err", err)
			c.redeliver(i, l, args, err)
			return err
		}
		v, err := scripts.RunInt(ctx, c.procs[i], args)
		c.exit(i)
		if err != nil {
			c.cfg.log.Debug("redlock: release failed", "addr", c.addrs[i], "key", l.name(), "err", err)
			if inDoubt(err) {
				c.redeliver(i, l, args, err) // redeliver.go
			}
			return err
		}
		if v == 0 {
			return errNotOurs
		}
		return nil
	})
	c.track(r)
	return r
}

// guarded turns the reply of a token-guarded script into a node's outcome:
// 1 is success, 0 means that the keys are gone or hold another token.
func guarded(v int64, err error) error {
	if err != nil {
		return err
	}
	if v == 0 {
		return errNotOurs
	}
	return nil
}

// refused reports whether an acquire's outcome says that the node did not set
// the keys.
func refused(err error) bool {
	return errors.Is(err, ErrTaken) || errors.Is(err, ErrGuarded) || err == errNotSent || err == errGone
}

// releaseAsync releases a lock that was not obtained. Callers hold c.mu for
// reading.
func (c *Client) releaseAsync(l *Lock) { c.release(context.Background(), l) }
