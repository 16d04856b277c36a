package redlock

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/testhook"
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

// Options configures a [Client]. The zero value of every field means the
// documented default, so a nil *Options is a valid configuration.
type Options struct {
	// Quorum is how many nodes must grant a lock. Zero means N/2+1, a strict
	// majority of the N nodes. It must be a majority (N/2 < Quorum ≤ N): two
	// majorities always share a node, which is what keeps two clients from
	// holding one lock at once.
	Quorum int

	// DriftFactor is the largest relative difference in clock rate assumed
	// between the client and any node over one TTL; the validity of a lock
	// gives up ttl·DriftFactor + 2ms for it (see [clock.Drift]). Zero means
	// DefaultDriftFactor (1%). It must be in [0, 0.5).
	DriftFactor float64

	// NodeTimeout bounds each request to a node. A node that has not answered
	// by then counts as failed for the round. Keep it small next to the TTLs
	// you use: a round can last up to NodeTimeout and its time is subtracted
	// from the validity. Zero means DefaultNodeTimeout.
	NodeTimeout time.Duration

	// MinRetryDelay and MaxRetryDelay bound the random wait between the
	// rounds of [Client.Lock]: the cap starts at MinRetryDelay and doubles per
	// round up to MaxRetryDelay, and the wait is drawn uniformly below it.
	// When the nodes report that the current holder's keys expire sooner,
	// Lock retries then instead. Zero means DefaultMinRetryDelay and
	// DefaultMaxRetryDelay.
	MinRetryDelay, MaxRetryDelay time.Duration

	// MaxWait bounds how long [Client.Lock] keeps trying when its context has
	// no deadline. Zero means DefaultMaxWait. A context deadline, when there
	// is one, governs instead.
	MaxWait time.Duration

	// KeyPrefix is prepended to every key on the nodes, for example
	// "lock:" (handy for a Redis ACL key pattern). Empty means no prefix.
	KeyPrefix string

	// Clock is the time source for validity and retry delays. Nil means
	// [clock.Real], Go's monotonic clock.
	Clock clock.Clock

	// RestartGuard is how long a node that lost its data (a restart without
	// persistence, FLUSHALL, eviction) refuses to grant locks, so that the
	// locks it forgot have expired before it grants them again. Zero means
	// DefaultRestartGuard (1 minute). Every TTL passed to Lock, TryLock,
	// LockMany or Extend must be at most RestartGuard, and every Client of
	// one deployment must use the same value. See [ErrGuarded] for how a
	// node detects the loss and how a brand-new deployment skips the wait.
	RestartGuard time.Duration

	// UnsafeNoRestartGuard turns the restart guard off: a node that restarts
	// without persistence grants locks at once, and a second client can win
	// a quorum while the first still holds the lock. Only for nodes whose
	// data survives any restart (appendonly yes, appendfsync always, no
	// eviction) or for tests. With it, fences can go backwards after a node
	// loses its data.
	UnsafeNoRestartGuard bool

	// Fencing makes every lock carry a fencing token, [Lock.Fence], that
	// strictly increases from one holder of a key to the next. Obtaining a
	// lock then takes a second round trip to the nodes (see [Lock.Fence]).
	// New refuses it (while the restart guard is on) unless a quorum of the
	// nodes are plain masters: on a Redis Cluster the counters live in the
	// per-slot node state (on a Ring, per shard; see [ErrGuarded]), and a
	// slot or shard not used before has an unknown counter there, so fenced
	// locks on it would fail if a quorum of nodes were such.
	Fencing bool

	// Logger receives warnings about node clients configured against the
	// algorithm's needs and about failures of background releases. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// config is Options validated and with defaults filled in.
type config struct {
	quorum           int
	drift            float64
	nodeTimeout      time.Duration
	minRetry, maxRet time.Duration
	maxWait          time.Duration
	prefix           string
	clock            clock.Clock
	log              *slog.Logger
	guard            time.Duration // 0: off
	fencing          bool
}

func (o *Options) config(n int) (config, error) {
	if o == nil {
		o = &Options{}
	}
	c := config{
		quorum:      o.Quorum,
		drift:       o.DriftFactor,
		nodeTimeout: o.NodeTimeout,
		minRetry:    o.MinRetryDelay,
		maxRet:      o.MaxRetryDelay,
		maxWait:     o.MaxWait,
		prefix:      o.KeyPrefix,
		clock:       o.Clock,
		log:         o.Logger,
		guard:       o.RestartGuard,
		fencing:     o.Fencing,
	}
	if c.quorum == 0 {
		c.quorum = n/2 + 1
	}
	if c.quorum > n || c.quorum <= 0 || (c.quorum <= n/2 && !testhook.AllowMinorityQuorum.Load()) {
		return c, fmt.Errorf("redlock: Options.Quorum %d is not a majority of %d nodes: want %d to %d", o.Quorum, n, n/2+1, n)
	}
	if c.drift == 0 {
		c.drift = DefaultDriftFactor
	}
	if err := clock.CheckDriftFactor(c.drift); err != nil {
		return c, fmt.Errorf("redlock: Options.DriftFactor %v is outside [0, 0.5)", o.DriftFactor)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"NodeTimeout", &c.nodeTimeout, DefaultNodeTimeout},
		{"MinRetryDelay", &c.minRetry, DefaultMinRetryDelay},
		{"MaxRetryDelay", &c.maxRet, DefaultMaxRetryDelay},
		{"MaxWait", &c.maxWait, DefaultMaxWait},
		{"RestartGuard", &c.guard, DefaultRestartGuard},
	} {
		if *d.v < 0 {
			return c, fmt.Errorf("redlock: Options.%s %v is negative", d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if o.UnsafeNoRestartGuard {
		if o.RestartGuard != 0 {
			return c, fmt.Errorf("redlock: Options.RestartGuard %v is set together with UnsafeNoRestartGuard", o.RestartGuard)
		}
		c.guard = 0
	} else if c.guard.Truncate(time.Millisecond) != c.guard {
		return c, fmt.Errorf("redlock: Options.RestartGuard %v is not a whole number of milliseconds", o.RestartGuard)
	}
	if c.minRetry > c.maxRet {
		return c, fmt.Errorf("redlock: Options.MinRetryDelay %v is above MaxRetryDelay %v", c.minRetry, c.maxRet)
	}
	if c.clock == nil {
		c.clock = clock.Real{}
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c, nil
}

// NodeOptions returns go-redis options for one lock node at addr with the
// settings the algorithm relies on:
//
//   - ContextTimeoutEnabled, so that the per-node timeout (a context
//     deadline) bounds socket reads and writes;
//   - MaxRetries -1: no client-level retry, so that a timed-out request is not
//     sent again behind the round's back;
//   - DisableIdentity, so that connecting does not send CLIENT SETINFO
//     (which Redis before 7.2 rejects);
//   - maintenance notifications off, since they relax timeouts to 10 s;
//   - Protocol 2 (RESP2): with RESP3, go-redis checks each connection for
//     pending push notifications around every command, a read system call
//     that cost about a third of the client's CPU time per lock round;
//   - DialerRetries 1: a node that refuses connections (it is down) fails a
//     request at once, instead of after go-redis's default of five dials
//     100 ms apart. A round often needs that failure to decide (when the
//     nodes still up split their votes), and the retries only keep the
//     node's request slots busy; the next request dials again.
//
// Adjust the result (password, TLS, pool size) before passing it to
// redis.NewClient, but keep the first four; the protocol and the dial
// retries are a matter of speed.
func NodeOptions(addr string) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		Protocol:              2,
		MaxRetries:            -1,
		DialerRetries:         1,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
		DialTimeout:           time.Second,
		ReadTimeout:           time.Second,
		WriteTimeout:          time.Second,
		MaintNotificationsConfig: &maintnotifications.Config{
			Mode: maintnotifications.ModeDisabled,
		},
	}
}

// NewNodes returns one client per address, each built from [NodeOptions].
// The caller owns the clients and closes them.
//
// Unlike a client you build yourself, these check a connection for a close
// by the server (go-redis's check before each command: a deadline reset, a
// peeking system call and three allocations) only when it has been idle for
// at least connCheckIdle (100 ms): a connection in steady use cannot have
// been closed unnoticed, and the check cost about 40% of a lock+unlock's
// allocations. A connection that was closed while idle for less than that
// fails its next command, once, which a round tolerates like any other
// failure of a minority of nodes.
func NewNodes(addrs ...string) []redis.UniversalClient {
	nodes := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(NodeOptions(a))
		c.AddHook(idleConnCheck{})
		nodes[i] = c
	}
	return nodes
}

// connCheckIdle is how long a connection of NewNodes' clients must have been
// idle for go-redis to check it before a command.
const connCheckIdle = 100 * time.Millisecond

// idleConnCheck is a go-redis hook that wraps each new connection in a
// checkedConn.
type idleConnCheck struct{}

func (idleConnCheck) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cc := &checkedConn{Conn: c}
		cc.sys, _ = c.(syscall.Conn)
		cc.used.Store(int64(time.Since(epoch)))
		return cc, nil
	}
}

func (idleConnCheck) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (idleConnCheck) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// epoch is the origin of checkedConn's monotonic times.
var epoch = time.Now()

// checkedConn is a connection that go-redis's pool checks (through
// SyscallConn, before taking it for a command) only when it has been idle
// for connCheckIdle; otherwise the check finds nothing to do.
type checkedConn struct {
	net.Conn
	sys  syscall.Conn // the connection's own, nil when it has none (TLS): never checked
	used atomic.Int64 // time since epoch of the last read or write, in ns
}

func (c *checkedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.used.Store(int64(time.Since(epoch)))
	return n, err
}

func (c *checkedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.used.Store(int64(time.Since(epoch)))
	return n, err
}

// SyscallConn returns the connection's raw connection when it has been idle
// for connCheckIdle, and one that checks nothing otherwise.
func (c *checkedConn) SyscallConn() (syscall.RawConn, error) {
	if c.sys != nil && time.Since(epoch)-time.Duration(c.used.Load()) >= connCheckIdle {
		return c.sys.SyscallConn()
	}
	return noCheck{}, nil
}

// noCheck is a syscall.RawConn on which every operation succeeds at once.
type noCheck struct{}

func (noCheck) Control(func(fd uintptr)) error           { return nil }
func (noCheck) Read(func(fd uintptr) (done bool)) error  { return nil }
func (noCheck) Write(func(fd uintptr) (done bool)) error { return nil }

// nodeInfo reports the addresses a node client talks to and the ways its
// configuration works against the algorithm.
func nodeInfo(node redis.UniversalClient, timeout time.Duration) (addrs []string, problems []string) {
	check := func(retries int, ctxTimeouts bool, read time.Duration) {
		if retries > 0 {
			problems = append(problems, fmt.Sprintf("MaxRetries is %d: a timed-out SET can be sent again behind the round's back (set MaxRetries: -1)", retries))
		}
		if !ctxTimeouts && (read <= 0 || read > timeout) {
			problems = append(problems, fmt.Sprintf("ContextTimeoutEnabled is false and ReadTimeout is %v: the per-node timeout %v will not bound socket reads, so a stalled node ties up a connection", read, timeout))
		}
	}
	switch c := node.(type) {
	case *redis.Client:
		o := c.Options()
		addrs = []string{o.Addr}
		check(o.MaxRetries, o.ContextTimeoutEnabled, o.ReadTimeout)
	case *redis.ClusterClient:
		o := c.Options()
		addrs = o.Addrs
		check(o.MaxRetries, o.ContextTimeoutEnabled, o.ReadTimeout)
	case *redis.Ring:
		o := c.Options()
		for _, a := range o.Addrs {
			addrs = append(addrs, a)
		}
		check(o.MaxRetries, o.ContextTimeoutEnabled, o.ReadTimeout)
	default:
		problems = append(problems, fmt.Sprintf("client type %T cannot be inspected: make sure it has no retries and honours context deadlines", node))
	}
	return addrs, problems
}
