package redlock

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/hashslot"
	"github.com/redquorum/redquorum/internal/node"
	"github.com/redquorum/redquorum/internal/protocol"
)

// Defaults for the zero fields of [Options].
const (
	DefaultDriftFactor   = 0.01
	DefaultNodeTimeout   = 50 * time.Millisecond
	DefaultMinRetryDelay = 5 * time.Millisecond
	DefaultMaxRetryDelay = 200 * time.Millisecond
	DefaultMaxWait       = 30 * time.Second
	DefaultRestartGuard  = time.Minute
)

// lingering is how many node timeouts a node call goes on reading its
// node's answer once its round has decided without it (see
// Options.NodeTimeout).
const lingering = 4

// Options configures a [Client]. The zero value of every field means the
// documented default, so a nil *Options is a valid configuration.
type Options struct {
	// Quorum is how many nodes must grant a lock. Zero means N/2+1, a strict
	// majority of the N nodes. It must be a majority (N/2 < Quorum ≤ N). Two
	// majorities always share a node, so two clients cannot hold one lock.
	Quorum int

	// DriftFactor is the largest relative difference in clock rate assumed
	// between the client and any node over one TTL. A lock's validity gives
	// up ttl·DriftFactor + 2ms for it (see [clock.Drift]). Zero means
	// DefaultDriftFactor (1%). It must be in [0, 0.5).
	DriftFactor float64

	// NodeTimeout bounds how long a round waits for each node. A node that
	// has not answered by then counts as failed for the round. Its request
	// still reads the answer for up to 4 × NodeTimeout more, on the same
	// connection, so that a node or a client host that is slow for a moment
	// costs no new connections, and a late grant is released as soon as it
	// arrives. Keep it small next to your TTLs: a round can last
	// NodeTimeout, and its time comes off the validity. Zero means
	// DefaultNodeTimeout.
	NodeTimeout time.Duration

	// MinRetryDelay and MaxRetryDelay bound the random wait between the
	// rounds of [Client.Lock]. The cap starts at MinRetryDelay and doubles
	// per round up to MaxRetryDelay; the wait is drawn uniformly below it.
	// When the nodes report that the holder's keys expire sooner, Lock
	// retries then. Zero means DefaultMinRetryDelay and DefaultMaxRetryDelay.
	MinRetryDelay, MaxRetryDelay time.Duration

	// MaxWait bounds how long [Client.Lock] keeps trying when its context has
	// no deadline. Zero means DefaultMaxWait. A context deadline, when there
	// is one, governs instead.
	MaxWait time.Duration

	// KeyPrefix is prepended to every key on the nodes, for example
	// "lock:" (handy for a Redis ACL key pattern). Empty means no prefix.
	KeyPrefix string

	// Clock is the time source of everything the lock times. That is the
	// validity, retry delays and waits, the local queue's expiry of a holder,
	// Do's extensions, the redelivery of releases and the idle time of
	// release subscriptions. Only socket-level timing reads the system
	// clock: request deadlines, the batching window and the idle connection
	// check of [NewNodes]. Nil means [clock.Real], Go's monotonic clock.
	Clock clock.Clock

	// RestartGuard is how long a node that lost its data refuses to grant
	// locks, so that the locks it forgot expire first. A restart without
	// persistence, FLUSHALL or eviction loses data. Zero means
	// DefaultRestartGuard (1 minute). Every TTL passed to Lock, TryLock,
	// LockMany or Extend must be at most RestartGuard. Every Client of one
	// deployment must use the same value. See [ErrGuarded], and
	// docs/SAFETY.md, "The restart guard", for why this is safe.
	RestartGuard time.Duration

	// UnsafeNoRestartGuard turns the restart guard off. A node that restarts
	// without persistence then grants locks at once, so a second client can
	// win a quorum while the first still holds the lock. Fences can go
	// backwards after a node loses its data. Use it only for tests, or for
	// nodes whose data survives any restart (appendonly yes, appendfsync
	// always, no eviction).
	UnsafeNoRestartGuard bool

	// Fencing makes every lock carry a fencing token, [Lock.Fence], that
	// strictly increases from one holder of a key to the next. Obtaining a
	// lock then takes a second round trip to the nodes. With the restart
	// guard on, New refuses Fencing unless a quorum of the nodes are plain
	// masters. A Cluster or Ring node keeps a counter per slot or shard,
	// unknown on first use, so fenced locks there would fail. See
	// [ErrGuarded], and docs/DESIGN.md, "Multi-key locks, Redis Cluster and
	// Ring nodes".
	Fencing bool

	// Owner names this Client's locks for whoever looks at the nodes
	// ([Client.Holder], redlock inspect). It is free text of at most
	// MaxOwnerLen bytes, without control characters. It is stored in every
	// lock key's value, after the token's random part, so it costs no round
	// trip. Empty means "<hostname>:<pid>".
	Owner string

	// Logger receives the library's log records. Nil means slog.Default().
	// Records carry the attributes "node" (a node's address), "key" and
	// "err" where they apply. Warn records say what to change. Debug records
	// are releases that failed or are retried in the background. Nothing is
	// logged at Info or above while the nodes and configuration are healthy.
	// See docs/OPERATING.md, "Logs".
	Logger *slog.Logger

	// NodeClientsAsGiven makes the Client send its commands through the
	// node clients exactly as given to [New]. By default New makes its own
	// client from the options of each plain *redis.Client node. Set this when
	// lock commands must pass through hooks added with AddHook (tracing,
	// metrics, fault injection): go-redis keeps hooks out of the options.
	// Your clients then need the settings of [NodeOptions]; New warns of each
	// one missing. New adds its connection check to their OnConnect, so make
	// the Client before other goroutines use them. Hooks see commands sent
	// while another is in flight in ProcessPipelineHook, not ProcessHook:
	// they go out as one pipeline. See docs/OPERATING.md, "Node clients".
	NodeClientsAsGiven bool

	// Observer, when not nil, receives an event for every operation, every
	// extension of [Client.Do] and every change of a node's state: see
	// [Observer]. The adapters in the nested modules
	// github.com/redquorum/redquorum/contrib/prometheus and
	// github.com/redquorum/redquorum/contrib/otel turn them into metrics
	// and traces. Nil costs nothing.
	Observer *Observer

	// Waiting is how Lock waits while the keys are taken; the zero value is
	// WaitDefault. See [Waiting].
	Waiting Waiting
}

// config is Options validated and with defaults filled in.
type config struct {
	quorum             int
	drift              float64
	nodeTimeout        time.Duration
	minRetry, maxRetry time.Duration
	maxWait            time.Duration
	prefix             string
	clock              clock.Clock
	log                *slog.Logger
	guard              time.Duration // 0: off
	fencing            bool
	owner              string
	observer           *Observer
	asGiven            bool // Options.NodeClientsAsGiven
	waiting            Waiting
	// checked is set for the fenced Client of elections (see
	// Client.forElections): its node clients' connections are checked
	// for the Client it serves.
	checked bool
	tunables
}

// tunables are settings that users do not choose but tests do (through
// export_test.go); nothing changes them once a Client is made.
type tunables struct {
	// batchWindow is how long after a batch of commands was sent to a node
	// later commands still queue behind it (internal/node).
	batchWindow time.Duration
	// wakeIdle is how long a key stays subscribed for release
	// announcements after its last wait (internal/wake).
	wakeIdle time.Duration
	// redeliveryLimit bounds each node's backlog of releases in doubt;
	// redeliverFirst and redeliverMax are the first and the largest delay
	// between redelivery attempts (internal/node).
	redeliveryLimit              int
	redeliverFirst, redeliverMax time.Duration
	// newDeploymentWindow bounds how far apart the nodes' restart guards
	// may have begun for a round to take them for a brand-new deployment
	// (see [ErrGuarded]). Nodes that came up further apart, as in a rolling
	// restart, serve locks only once their guards run out. It also bounds a
	// round's node calls while the Client has never seen a node in service
	// (see Client.callTimeout).
	newDeploymentWindow time.Duration
	// graceCap bounds how long a waiter lets the waiter that a release
	// named as next in line take the key before it tries itself (see
	// internal/waiting, inLineWait.grace).
	graceCap time.Duration
	// graceFloor is the shortest of those graces.
	graceFloor time.Duration
	// yieldWindow is how long after an announcement that named a waiter of
	// another client a Lock's first round lets that waiter go first (see
	// internal/waiting, inLineWait.First).
	yieldWindow time.Duration
	// linger is how long a node call may go on reading its node's answer
	// after its round has decided without it (quorum.Workers.StartLinger):
	// lingering times the node timeout (see Client.start).
	linger time.Duration
	// scriptAcquires sends every acquire as the script, never as the
	// pipelined acquire (internal/node): for tests whose faults act on an
	// acquire's one command.
	scriptAcquires bool
	// noTopUp keeps a lock that a handoff gave from being acquired on the
	// nodes that did not hand it off (see Client.topUp): for tests.
	noTopUp bool
}

// defaultTunables are the tunables of every Client.
func defaultTunables() tunables {
	return tunables{
		batchWindow:         5 * time.Millisecond,
		wakeIdle:            5 * time.Second,
		redeliveryLimit:     4096,
		redeliverFirst:      50 * time.Millisecond,
		redeliverMax:        2 * time.Second,
		newDeploymentWindow: 5 * time.Second,
		yieldWindow:         10 * time.Millisecond,
		graceFloor:          time.Millisecond,
	}
}

// config validates o for n nodes and fills in the defaults. A nil o is the
// zero Options.
func (o *Options) config(n int) (config, error) {
	if o == nil {
		o = &Options{}
	}
	c := config{
		quorum: o.Quorum, drift: o.DriftFactor, nodeTimeout: o.NodeTimeout,
		minRetry: o.MinRetryDelay, maxRetry: o.MaxRetryDelay, maxWait: o.MaxWait,
		prefix: o.KeyPrefix, clock: o.Clock, log: o.Logger, guard: o.RestartGuard,
		fencing: o.Fencing, observer: o.Observer, asGiven: o.NodeClientsAsGiven, tunables: defaultTunables(),
	}
	if c.quorum == 0 {
		c.quorum = n/2 + 1
	}
	if c.quorum > n || c.quorum <= n/2 {
		return c, fmt.Errorf("redlock: Options.Quorum %d is not a majority of %d nodes: want %d to %d", o.Quorum, n, n/2+1, n)
	}
	if c.drift == 0 {
		c.drift = DefaultDriftFactor
	}
	if err := clock.CheckDriftFactor(c.drift); err != nil {
		return c, fmt.Errorf("redlock: Options.DriftFactor %v is outside [0, 0.5)", o.DriftFactor)
	}
	if err := c.durations(); err != nil {
		return c, err
	}
	if err := c.checkWaiting(o.Waiting); err != nil {
		return c, err
	}
	c.graceCap = c.nodeTimeout
	c.linger = lingering * c.nodeTimeout
	c.yieldWindow = min(c.yieldWindow, c.nodeTimeout)
	if err := c.restartGuard(o); err != nil {
		return c, err
	}
	if err := c.setOwner(o.Owner); err != nil {
		return c, err
	}
	if c.clock == nil {
		c.clock = clock.Real{}
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c, nil
}

// durations checks the durations of c and fills in their defaults.
func (c *config) durations() error {
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"NodeTimeout", &c.nodeTimeout, DefaultNodeTimeout},
		{"MinRetryDelay", &c.minRetry, DefaultMinRetryDelay},
		{"MaxRetryDelay", &c.maxRetry, DefaultMaxRetryDelay},
		{"MaxWait", &c.maxWait, DefaultMaxWait},
		{"RestartGuard", &c.guard, DefaultRestartGuard},
	} {
		if *d.v < 0 {
			return fmt.Errorf("redlock: Options.%s %v is negative", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if c.minRetry > c.maxRetry {
		return fmt.Errorf("redlock: Options.MinRetryDelay %v is above MaxRetryDelay %v", c.minRetry, c.maxRetry)
	}
	return nil
}

// restartGuard applies o's restart guard settings to c.
func (c *config) restartGuard(o *Options) error {
	if o.UnsafeNoRestartGuard {
		if o.RestartGuard != 0 {
			return fmt.Errorf("redlock: Options.RestartGuard %v is set together with UnsafeNoRestartGuard", o.RestartGuard)
		}
		c.guard = 0
	} else if c.guard.Truncate(time.Millisecond) != c.guard {
		return fmt.Errorf("redlock: Options.RestartGuard %v is not a whole number of milliseconds", o.RestartGuard)
	}
	return nil
}

// MaxOwnerLen is the longest Options.Owner, in bytes.
const MaxOwnerLen = 256

// setOwner checks owner and sets it, or the default, on c.
func (c *config) setOwner(owner string) error {
	if owner == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "localhost"
		}
		owner = host + ":" + strconv.Itoa(os.Getpid())
	}
	if len(owner) > MaxOwnerLen {
		return fmt.Errorf("redlock: Options.Owner is %d bytes long, above MaxOwnerLen (%d)", len(owner), MaxOwnerLen)
	}
	if i := strings.IndexFunc(owner, unicode.IsControl); i >= 0 {
		return fmt.Errorf("redlock: Options.Owner %q has a control character at byte %d", owner, i)
	}
	c.owner = owner
	return nil
}

// nodeConfig returns what the nodes of a Client with c share.
func (c *config) nodeConfig(closing <-chan struct{}) *node.Config {
	return &node.Config{
		Prefix: c.prefix, Protocol: c.protocol(), Clock: c.clock, Log: c.log,
		Tags: new(hashslot.Tags), Closing: closing, Checked: c.checked,
		BatchWindow: c.batchWindow, RedeliveryLimit: c.redeliveryLimit, ScriptAcquires: c.scriptAcquires,
		RedeliverFirst: c.redeliverFirst, RedeliverMax: c.redeliverMax,
		// Nothing waits for a redelivery but Close, and a node slower than
		// the node timeout should still get its releases.
		RedeliverTimeout: max(4*c.nodeTimeout, 500*time.Millisecond),
	}
}

// protocol returns the commands of a Client with c: with lines of waiters
// on the nodes unless it waits with WaitBackoff.
func (c *config) protocol() *protocol.Protocol {
	s := protocol.Handoff
	switch {
	case c.waiting == WaitBackoff:
		s = protocol.Announce
	case c.waiting == WaitInLine || c.fencing:
		s = protocol.InLine
	}
	return protocol.New(c.guard, c.fencing, s, c.prefix)
}
