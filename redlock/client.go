package redlock

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/retry"
	"github.com/redquorum/redquorum/internal/scripts"
	"github.com/redquorum/redquorum/quorum"
)

// Client locks keys on N independent Redis masters. It is safe for
// concurrent use. Its requests to the nodes that outlive the call that
// started them (the answer of a slow node after the quorum was decided, the
// release that must follow it) belong to the Client: [Client.Close] waits for
// them. Callers of [Client.Lock] on one key take turns locally (queue.go).
type Client struct {
	nodes []redis.UniversalClient
	addrs []string // one display name per node
	cfg   config

	mu     sync.RWMutex // guards closed; held for reading while background work is added to bg
	closed bool
	bg     sync.WaitGroup

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
	c := &Client{nodes: nodes, addrs: make([]string, len(nodes)), cfg: cfg, turns: newTurns()}
	seenAddr := map[string]int{}
	for i, n := range nodes {
		if n == nil {
			return nil, fmt.Errorf("redlock: nodes[%d] is nil", i)
		}
		for j := range i {
			if nodes[j] == n {
				return nil, fmt.Errorf("redlock: nodes[%d] is the same client as nodes[%d]", i, j)
			}
		}
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
	return c, nil
}

// Close waits for the Client's outstanding background requests (late node
// answers and the releases that follow them) and makes every later operation
// return [ErrClosed]. Unlock the locks you hold before Close. Close does not
// close the node clients. It is safe to call more than once.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.turns.close() // queue.go: waiters return ErrClosed
	c.wake.close()  // wake.go: stops and waits for the pub/sub listeners
	c.bg.Wait()
	return nil
}

// track hands a round's outstanding calls to the Client, which waits for them
// in Close. Callers hold c.mu for reading and have checked c.closed.
func (c *Client) track(r *quorum.Round) { r.Own(&c.bg) }

// TryLock makes exactly one attempt to lock key for ttl on a quorum of nodes
// and returns the held [Lock], or an error.
//
// On failure nothing is left behind: every node that granted the lock, or
// whose answer did not come, is sent a token-guarded release, after its
// answer for nodes still outstanding. The error is an [*Error] that wraps
// [ErrNotObtained] (and ctx.Err() when ctx ended the attempt); bad arguments
// (empty key, ttl that is not positive or too small to survive the drift
// allowance) give a plain error naming the value.
//
// The lock's validity is ttl minus the round's duration minus the drift
// allowance; ttl is used in whole milliseconds. TryLock does not take part
// in the local queue of [Client.Lock]: it makes its round at once.
func (c *Client) TryLock(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	ttl, err := c.checkArgs(key, ttl)
	if err != nil {
		return nil, err
	}
	l, _, err := c.attempt(ctx, key, ttl)
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
// concurrent use. Concurrent callers of one Client on one key take turns:
// one at a time runs rounds and, once it holds the lock, keeps its turn until
// it unlocks or the lock's validity ends, while the others wait in this
// process in arrival order.
func (c *Client) Lock(ctx context.Context, key string, ttl time.Duration) (*Lock, error) {
	ttl, err := c.checkArgs(key, ttl)
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
	turn, err := c.turns.wait(ctx, key, giveUpCh, c)
	if err != nil {
		return nil, c.queueError(key, err)
	}
	obtained := false
	defer func() {
		if !obtained {
			c.turns.leave(turn)
		}
	}()
	for attempt := 0; ; attempt++ {
		roundStart := c.cfg.clock.Now()
		l, hint, err := c.attempt(ctx, key, ttl)
		if err == nil {
			obtained = true
			c.turns.held(turn, l) // keeps the turn until Unlock or Until
			return l, nil
		}
		var e *Error
		if !errors.As(err, &e) || ctx.Err() != nil {
			if e != nil && !errors.Is(err, ctx.Err()) {
				e.cause = errors.Join(e.cause, ctx.Err()) // ended during a round decided by the nodes
			}
			return nil, err // closed, or the context ended during the round
		}
		wait := retry.Delay(attempt, c.cfg.minRetry, c.cfg.maxRet)
		if hint > 0 && hint < wait {
			// Come back when the holder's keys expire, spread a little so
			// that waiters do not arrive in step.
			wait = hint + retry.Jitter(min(c.cfg.minRetry, hint/4))
		}
		select {
		case <-c.cfg.clock.After(wait):
		case <-c.wakeOn(l0key(c, key)): // wake.go: a node announced the key's release
			wakeJitter(c, c.cfg.clock.Now().Sub(roundStart))
		case <-ctx.Done():
			e.cause = errors.Join(e.cause, ctx.Err())
			return nil, e
		case <-giveUpCh():
			e.Reason = joinReason(e.Reason, fmt.Sprintf("gave up after Options.MaxWait %v", c.cfg.maxWait))
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

// checkArgs validates a key and a ttl and returns the ttl cut to whole
// milliseconds, which is what the nodes apply.
func (c *Client) checkArgs(key string, ttl time.Duration) (time.Duration, error) {
	if key == "" {
		return 0, errors.New("redlock: empty key")
	}
	ms := ttl.Truncate(time.Millisecond)
	if ttl > 0 && ms == 0 {
		return 0, fmt.Errorf("redlock: ttl %v is below the nodes' 1ms resolution", ttl)
	}
	if err := clock.CheckTTL(ms, c.cfg.drift); err != nil {
		return 0, fmt.Errorf("redlock: %w", err)
	}
	return ms, nil
}

// attempt makes one lock round. On failure it also returns how long until
// the current holder's keys have expired on enough nodes for a quorum, or 0
// when unknown.
func (c *Client) attempt(ctx context.Context, key string, ttl time.Duration) (*Lock, time.Duration, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return nil, 0, ErrClosed
	}
	n := len(c.nodes)
	l := &Lock{
		c:     c,
		key:   key,
		rkey:  c.cfg.prefix + key,
		token: retry.Token(),
		held:  make([]int64, n),
	}
	args := scripts.Args(scripts.Acquire, l.rkey, l.token, ttl.Milliseconds()) // by SHA, built once per round
	start := c.cfg.clock.Now()
	r := quorum.Start(ctx, n, c.cfg.nodeTimeout, func(ctx context.Context, i int) error {
		v, err := scripts.RunInt(ctx, c.nodes[i], args)
		if err != nil {
			return err
		}
		if v != 0 {
			l.held[i] = v
			return ErrTaken
		}
		return nil
	})
	c.track(r)
	l.acq = r
	ok, qerr := r.Await(ctx, c.cfg.quorum)
	validity := clock.Validity(ttl, c.cfg.clock.Now().Sub(start), c.cfg.drift)
	if qerr == nil && validity > 0 {
		l.until = start.Add(validity)
		return l, 0, nil
	}
	e := c.newError("lock", key, ok, r, ErrNotObtained, qerr)
	if qerr == nil {
		e.Reason = fmt.Sprintf("the round took too long: validity %v after ttl %v and drift allowance %v", validity, ttl, clock.Drift(ttl, c.cfg.drift))
	}
	c.releaseAsync(l)
	return nil, c.freeIn(l), e
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
		case errors.Is(res, ErrTaken) && l.held[i] > 0:
			ttls = append(ttls, l.held[i])
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
	return e
}

// release sends the token-guarded release of l to every node in parallel,
// each after that node's acquire has answered, skipping nodes whose acquire
// said the key was taken. It returns the round without waiting for it; the
// round belongs to the Client.
func (c *Client) release(ctx context.Context, l *Lock) *quorum.Round {
	// Unlock (l.released), not the clean-up of a failed round, announces
	// the release to waiting clients (wake.go).
	announce := "0"
	if l.released {
		announce = "1"
	}
	args := scripts.Args(scripts.Release, l.rkey, l.token, announce)
	// The wait for an outstanding acquire is bounded by its own timeout,
	// hence the round's two node timeouts, and a release sent after such a
	// wait by its own. When every acquire has answered (the usual Unlock)
	// there is nothing to wait for and the round's timeout is the node
	// timeout.
	timeout := c.cfg.nodeTimeout
	if !l.acq.AllDone() {
		timeout *= 2
	}
	r := quorum.Start(context.WithoutCancel(ctx), len(c.nodes), timeout, func(ctx context.Context, i int) error {
		select {
		case <-l.acq.Done(i):
		default:
			<-l.acq.Done(i)
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.cfg.nodeTimeout)
			defer cancel()
		}
		if res, _ := l.acq.Result(i); errors.Is(res, ErrTaken) {
			return errSkipped
		}
		v, err := scripts.RunInt(ctx, c.nodes[i], args)
		if err != nil {
			c.cfg.log.Debug("redlock: release failed", "addr", c.addrs[i], "key", l.rkey, "err", err)
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

// releaseAsync releases a lock that was not obtained. Callers hold c.mu for
// reading.
func (c *Client) releaseAsync(l *Lock) { c.release(context.Background(), l) }
