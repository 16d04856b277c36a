package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/node"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/queue"
	"github.com/redquorum/redquorum/internal/waiting"
)

// Client locks keys on N independent Redis masters. It is safe for
// concurrent use. Some node requests outlive the call that started them: a
// slow node's answer after the quorum was decided, and the release that
// follows it. Those belong to the Client, and [Client.Close] waits for them.
type Client struct {
	cfg      config
	stateKey string // the nodes' state key as stored (protocol.StateKey after the prefix)
	nodes    []*node.Node
	proto    *protocol.Protocol
	sharded  bool // some node is a Cluster or a Ring: a lock's keys must share a hash tag

	// inService is set once a node answered an acquire out of its guard:
	// from then on this Client never takes the nodes for a new deployment.
	inService atomic.Bool

	obs *observing // nil without an Options.Observer (record.go)

	servers node.Servers // tells the nodes' servers apart (servers.go)

	owned   []redis.UniversalClient // node clients made by New or Open, closed by Close
	clients []redis.UniversalClient // the node clients the Client sends through

	// elections is the Client of this Client's elections when it has no
	// Options.Fencing, made once by forElections, with its error.
	electionsOnce sync.Once
	elections     *Client
	electionsErr  error

	life  lifetime               // closed state and the calls in flight (lifetime.go)
	locks heldLocks              // locks obtained and not unlocked, which Close releases
	queue *queue.Queue[handover] // local queue per key (internal/queue)
	wait  waiting.Strategy       // how Lock waits between its rounds (internal/waiting)
}

// New returns a Client that locks on nodes: independent Redis masters, each
// a go-redis client. opts may be nil. A bad value gives an error naming it:
// no nodes, a nil node, a node given twice, or an option out of range.
//
// A plain *redis.Client is not used itself. New makes a client from a copy
// of its options, with [NodeOptions] applied, and Close closes it.
// Sentinel, Cluster and Ring clients, [NewNodes]' clients, and every client
// under Options.NodeClientsAsGiven are used as given. Each new connection
// is checked against the node's state, which may start its restart guard
// ([ErrGuarded]). See docs/OPERATING.md, "Node clients".
func New(nodes []redis.UniversalClient, opts *Options) (*Client, error) {
	if len(nodes) == 0 {
		return nil, errors.New("redlock: no nodes")
	}
	cfg, err := opts.config(len(nodes))
	if err != nil {
		return nil, err
	}
	return newClient(nodes, cfg)
}

// newClient is New with the configuration made.
func newClient(given []redis.UniversalClient, cfg config) (*Client, error) {
	names, err := checkNodes(given, cfg)
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, life: newLifetime(), obs: newObserving(cfg.observer, len(given))}
	c.stateKey = c.stored(protocol.StateKey)
	ncfg := cfg.nodeConfig(c.life.closing)
	ncfg.Servers = &c.servers
	c.proto = ncfg.Protocol
	clients := make([]redis.UniversalClient, len(given)) // the clients the Client sends through
	c.nodes = make([]*node.Node, len(given))
	for i, cl := range given {
		clients[i] = cl
		if d := derivable(cl, cfg); d != nil {
			clients[i] = deriveClient(d)
			c.owned = append(c.owned, clients[i])
		}
		c.nodes[i] = node.New(clients[i], names[i], ncfg)
	}
	if err := c.checkKinds(); err != nil {
		_ = closeClients(c.owned)
		return nil, err
	}
	c.clients = clients
	c.queue = queue.New[handover](cfg.clock)
	c.wait = c.newStrategy(clients)
	return c, nil
}

// checkKinds looks at the Cluster and Ring nodes: their restart guard and
// fence counters are per hash slot or shard.
func (c *Client) checkKinds() error {
	var clusters, sharded int
	for _, n := range c.nodes {
		switch n.Kind() {
		case node.Cluster:
			clusters++
			sharded++
		case node.Ring:
			sharded++
		}
	}
	c.sharded = sharded > 0
	n, cfg := len(c.nodes), c.cfg
	if c.sharded && cfg.waiting == WaitHandoff {
		return fmt.Errorf("redlock: Options.Waiting %v needs plain nodes, and %d of the %d nodes are a Redis Cluster or Ring (use WaitInLine)", cfg.waiting, sharded, n)
	}
	if cfg.guard > 0 && n-clusters < cfg.quorum {
		cfg.log.Warn("redlock: a quorum of the nodes are Redis Clusters, whose restart guard is per hash slot: the first lock on a slot that this deployment has not used yet waits Options.RestartGuard (only a new Client's first slot is taken at once); give lock keys few hash tags, such as {locks}:order:42",
			"clusters", clusters, "nodes", n, "restart_guard", cfg.guard)
	}
	if cfg.fencing && cfg.guard > 0 && n-sharded < cfg.quorum {
		return fmt.Errorf("redlock: Options.Fencing needs at least %d plain masters among the %d nodes, and %d are a Redis Cluster or Ring: there the fence counters are kept per hash slot or shard, one that the deployment has not used yet has an unknown counter, and fenced locks on its keys would fail with ErrFenceUnknown", cfg.quorum, n, sharded)
	}
	return nil
}

// Close releases the Client's locks that are still held, without handing
// any over. Every later operation returns [ErrClosed], and so do callers
// waiting in [Client.Lock]. A running [Client.Do] sees its lock lost.
// Release errors are dropped: unlock your locks yourself to see them.
//
// Close waits for the Client's calls in flight and stops its goroutines.
// It closes the node clients it made ([New]) or came with ([Open]). Close
// the ones you gave to New yourself, after it. Close is safe to call more
// than once. What it waits for: docs/OPERATING.md, "Closing a Client".
func (c *Client) Close() error {
	c.life.begin() // waits for a lock end with ErrClosed: no new lock to release
	c.electionsOnce.Do(func() {})
	if c.elections != nil {
		_ = c.elections.Close() // its node clients are c's
	}
	c.queue.Close() // and so do the waits for a turn in the local queue
	c.locks.releaseAll()
	c.life.close(func() {
		c.queue.Close() // waiters in the local queue return ErrClosed
		c.wait.Close()  // stops and waits for the pub/sub listeners
	})
	for _, n := range c.nodes {
		n.Wait() // the last redelivery attempts
	}
	return closeClients(c.owned)
}

// TryLock makes one attempt to lock key for ttl on a quorum of nodes,
// outside the local queue of [Client.Lock]. It returns the held [Lock], or
// an [*Error] wrapping [ErrNotObtained] and, if ctx ended the attempt,
// ctx.Err(). Bad arguments send nothing and give an error naming the value.
//
// The lock is valid for ttl, in whole milliseconds, minus the round's
// duration and the drift allowance. ctx bounds the wait for the quorum, not
// the node calls, which run to Options.NodeTimeout. A failed attempt
// releases every node that granted or did not answer (docs/OPERATING.md,
// "Failed rounds").
func (c *Client) TryLock(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	return c.lock(ctx, OpTryLock, []string{key}, ttl, waitNot)
}

// TryLockMany is [Client.TryLock] for a lock over several keys, taken
// together. Each node grants all of them or none, in one script, and the
// quorum is counted over nodes. [Lock.Unlock] and [Lock.Extend] act on all
// the keys. Bad input gives an error naming it: no keys, an empty key, a
// key given twice, or keys with different hash tags on a Cluster or Ring.
//
// On a Redis Cluster node a script may only touch keys of one hash slot
// (on a Ring, of one shard). So give every key of one lock the same hash
// tag, for example "{order:42}:stock" and "{order:42}:payment".
func (c *Client) TryLockMany(ctx context.Context, keys []string, ttl time.Duration) (*Lock, error) {
	return c.lock(ctx, OpTryLockMany, slices.Clone(keys), ttl, waitNot)
}

// Lock is like [Client.TryLock] but retries until it holds the lock or ctx
// is done. When ctx has no deadline, it stops after Options.MaxWait.
// Between rounds it waits as Options.Waiting says: a jittered backoff from
// Options.MinRetryDelay, cut short by a release. It also waits behind this
// Client's other callers for the same keys, in arrival order.
//
// It gives up at once on a cause that no retry fixes (docs/OPERATING.md,
// "Errors"). On failure it returns the [*Error] of its last round.
// errors.Is finds [ErrNotObtained], the nodes' causes, and ctx.Err() when
// ctx ended the wait.
func (c *Client) Lock(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	return c.lock(ctx, OpLock, []string{key}, ttl, waitMax)
}

// LockMany is [Client.Lock] for several keys taken together, as in
// [Client.TryLockMany].
func (c *Client) LockMany(ctx context.Context, keys []string, ttl time.Duration) (*Lock, error) {
	return c.lock(ctx, OpLockMany, slices.Clone(keys), ttl, waitMax)
}

// lock is op on keys, reported to the Observer if there is one.
func (c *Client) lock(ctx context.Context, op Op, keys []string, ttl time.Duration, wait waitFor) (*Lock, error) {
	if c.obs == nil {
		return c.lockRounds(ctx, keys, ttl, wait, nil)
	}
	ctx, rec := c.begin(ctx, op, keys)
	l, err := c.lockRounds(ctx, keys, ttl, wait, rec)
	rec.end(err, Obtained)
	return l, err
}

// ready returns the error of a lock call that must send nothing: ctx is
// done (a round would only leave tombstones behind), or two nodes were
// found to be one server.
func (c *Client) ready(ctx context.Context, keys []string) error {
	if err := ctx.Err(); err != nil {
		return &Error{Op: "lock", Key: strings.Join(keys, ", "), Quorum: c.cfg.quorum, sentinel: ErrNotObtained, ctx: err}
	}
	return c.sameServer(keys)
}

// tryOnce is TryLock's one round, whose error names a lasting cause in
// full (see Error.final) or the same server found twice by its
// connections.
func (c *Client) tryOnce(ctx context.Context, keys []string, ttl time.Duration, rec *record) (*Lock, error) {
	l, _, _, err := c.attempt(ctx, keys, ttl, handover{}, nil, waiting.Join{}, protocol.Layer{}, rec)
	if err != nil && c.servers.Err() != nil {
		return nil, c.sameServer(keys)
	}
	if e := (*Error)(nil); errors.As(err, &e) {
		e.final() // waits for the other nodes when one hints at a lasting cause
	}
	return l, err
}

// handed returns the lock that the nodes handed off to lw's waiter, with
// ttl, or nil. It returns ErrClosed on a closed Client, or when Close began
// meanwhile (the lock is then released).
func (c *Client) handed(lw *lockWait, ttl time.Duration) (*Lock, error) {
	if err := c.life.enter(); err != nil {
		return nil, err
	}
	defer c.life.exit()
	h, ok := lw.wt.Handed(ttl)
	if !ok {
		return nil, nil
	}
	return newLock(c.handedRound(lw.keys, ttl, &h))
}

// lockRounds locks keys, which the Lock may keep. With wait waitNot
// (TryLock) it makes one round. Otherwise (Lock) it makes rounds with the
// waits of its waiting strategy (wait.go, internal/waiting) between them,
// until one obtains the lock or the wait gives up. rec, when not nil,
// records the rounds.
func (c *Client) lockRounds(ctx context.Context, keys []string, ttl time.Duration, wait waitFor, rec *record) (*Lock, error) {
	ttl, err := c.checkArgs(keys, ttl)
	if err != nil {
		return nil, err
	}
	if err := c.ready(ctx, keys); err != nil {
		return nil, err
	}
	if wait == waitNot {
		return c.tryOnce(ctx, keys, ttl, rec)
	}
	began := c.cfg.clock.Now()
	var last *Error
	var hint time.Duration
	var turn *queue.Turn[handover]
	if c.wait.Direct(keys[0]) {
		turn = c.queue.TryJoin(queueKey(keys))
	}
	if turn != nil {
		// Nobody else of this Client wants the keys: the round TryLock
		// makes, with no waiter, no place in line and no strategy state.
		// A refusal makes the wait (see waiting.Strategy.Direct).
		l, freeIn, _, err := c.attempt(ctx, keys, ttl, handover{}, nil, waiting.Join{}, protocol.Layer{}, rec)
		if err == nil {
			l.turn = turn
			c.queue.Held(turn, l.Until())
			return l, nil
		}
		if last, err = c.refused(keys, err, nil); err != nil {
			c.queue.Leave(turn)
			return nil, err
		}
		hint = freeIn
	}
	lw := c.newLockWait(ctx, keys, began, wait)
	lw.turn = turn
	return c.waitRounds(ctx, &lw, ttl, last, hint, rec)
}

// waitRounds is Lock's rounds with the waits of lw between them, after
// last, the error of the direct round (nil without one), which gave the
// hint.
func (c *Client) waitRounds(ctx context.Context, lw *lockWait, ttl time.Duration, last *Error, hint time.Duration, rec *record) (*Lock, error) {
	keys := lw.keys
	defer lw.leave()
	for {
		prev, err := lw.next(ctx, last, hint)
		if err != nil {
			if rec != nil {
				rec.gaveUp = true
			}
			return nil, err
		}
		if l, err := c.handed(lw, ttl); l != nil || err != nil {
			if err != nil {
				return nil, err
			}
			lw.held(l)
			return l, nil
		}
		j := lw.wt.Join()
		// After the last round's clean-up, which it must not overtake.
		l, freeIn, calls, err := c.attempt(ctx, keys, ttl, prev, cleanupOf(last), j, protocol.Layer{}, rec)
		if err == nil {
			lw.held(l)
			return l, nil
		}
		lw.wt.Failed(j, ttl, calls)
		if last, err = c.refused(keys, err, last); err != nil {
			return nil, err
		}
		hint = freeIn
	}
}

// refused sorts err, the failure of a lock round for keys. To retry, it
// returns the round's [*Error], linked to last, the round before. Else it
// returns the error for Lock to return: the same server found twice by the
// round's connections, a closed Client, or a cause that no retry fixes.
func (c *Client) refused(keys []string, err error, last *Error) (*Error, error) {
	if err := c.sameServer(keys); err != nil {
		return nil, err
	}
	var e *Error
	if !errors.As(err, &e) {
		return nil, err // closed
	}
	if e.earlier = last; last != nil {
		last.earlier = nil // one round back is enough
	}
	if e.final() {
		return nil, e
	}
	return e, nil
}
