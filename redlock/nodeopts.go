package redlock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/redquorum/redquorum/internal/node"
)

// NodeOptions returns go-redis options for one lock node at addr, with
// the settings the algorithm relies on. These are: context deadlines that
// bound socket I/O, no client-level retry, no CLIENT SETINFO, no
// maintenance notifications, RESP2 and one dial per request.
//
// Adjust the result (password, TLS, pool size), but keep the first four.
// [New] applies these settings itself to the plain clients you give it.
// You need NodeOptions only for clients used as given, such as Sentinel
// clients. Why each one: docs/OPERATING.md, "Node clients".
func NodeOptions(addr string) *redis.Options {
	o := &redis.Options{
		Addr:         addr,
		DialTimeout:  time.Second,
		ReadTimeout:  time.Second,
		WriteTimeout: time.Second,
	}
	lockSettings(o)
	return o
}

// lockSettings applies to o the settings of [NodeOptions] that the algorithm
// and its speed rely on.
func lockSettings(o *redis.Options) {
	o.Protocol = 2
	o.MaxRetries = -1
	o.DialerRetries = 1
	o.ContextTimeoutEnabled = true
	o.DisableIdentity = true
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	// Pipelines (batches, the pipelined acquire) on the client's one pool:
	// go-redis's own pool for them holds more connections, each with 128
	// KiB buffers, and after CLIENT KILL on the nodes a release on the main
	// pool then met a closed connection (EOF) on most nodes.
	o.PipelinePoolSize = -1
}

// deriveClient returns the Client's own client for the plain node client
// c. It talks to the same server the same way: address, network and
// dialer, credentials, TLS, DB, client name, pool, timeouts and c's own
// OnConnect. It has the settings of [NodeOptions] and the idle connection
// check of [NewNodes]. Hooks added to c with AddHook are not carried over:
// go-redis keeps them outside the options. c is not changed.
func deriveClient(c *redis.Client) *redis.Client {
	o := *c.Options() // as c's NewClient filled it in
	lockSettings(&o)
	o.ReadTimeout, o.WriteTimeout = undoDefault(o.ReadTimeout), undoDefault(o.WriteTimeout)
	// c's own OnConnect, without the connection checks of Clients that use
	// c as given: the new client gets a check of its own.
	o.OnConnect = node.OwnOnConnect(o.OnConnect)
	// c's processor of RESP3 push notifications, and its client-side
	// cache, which needs RESP3: neither applies to a RESP2 client, and
	// neither is to be shared.
	o.PushNotificationProcessor = nil
	o.ClientSideCache, o.ClientSideCacheConfig = nil, nil
	return newNodeClient(&o)
}

// undoDefault returns the ReadTimeout or WriteTimeout that go-redis's
// NewClient turns into t. NewClient maps -1 (no timeout) to 0, and -2 (no
// deadline set at all) to -1. It would read a 0 again as its default of
// seconds.
func undoDefault(t time.Duration) time.Duration {
	switch t {
	case 0:
		return -1
	case -1:
		return -2
	}
	return t
}

// NewNodes returns one client per address, each built from [NodeOptions].
// An address is host:port or a redis:// or rediss:// URL, as [Open] takes
// it. The caller owns the clients and closes them.
//
// NewNodes returns no error: the client of a malformed address fails every
// command with the error that Open returns for it. These clients check a
// connection for a close by the server only after 100 ms idle. See
// docs/OPERATING.md, "Node clients".
func NewNodes(addrs ...string) []redis.UniversalClient {
	nodes := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		o, err := addrOptions(a)
		if err != nil {
			o = NodeOptions(a)
			err = addrError(i, a, err)
		}
		nodes[i] = newNodesClient(o, err)
	}
	return nodes
}

// newNodesClient returns a client of NewNodes with o, whose dials fail with
// err when it is not nil.
func newNodesClient(o *redis.Options, err error) *redis.Client {
	o.Dialer = nodesDialer{timeout: o.DialTimeout, tls: o.TLSConfig, err: err}.dial
	return newNodeClient(o)
}

// newNodeClient returns a client with o and the idle connection check.
func newNodeClient(o *redis.Options) *redis.Client {
	c := redis.NewClient(o)
	c.AddHook(idleConnCheck{epoch: time.Now()})
	return c
}

// nodesDialer is the dialer of NewNodes' clients. It dials as go-redis's
// own does: TCP with its keep-alive, and TLS when the options have a
// TLSConfig (go-redis applies that only in its own dialer). It also marks
// the clients, so that New sends through them as they are (see derivable)
// rather than make a second pool from the same settings.
type nodesDialer struct {
	timeout time.Duration
	tls     *tls.Config // nil: plain TCP
	err     error       // the address is malformed: every dial fails with err
}

func (d nodesDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.err != nil {
		return nil, d.err
	}
	nd := &net.Dialer{Timeout: d.timeout, KeepAlive: 5 * time.Minute}
	if d.tls == nil {
		return nd.DialContext(ctx, network, addr)
	}
	return (&tls.Dialer{NetDialer: nd, Config: d.tls}).DialContext(ctx, network, addr)
}

// madeByNewNodes reports whether NewNodes made c.
func madeByNewNodes(c *redis.Client) bool {
	f := c.Options().Dialer
	return f != nil && reflect.ValueOf(f).Pointer() == reflect.ValueOf(nodesDialer{}.dial).Pointer()
}

// connCheckIdle is how long a connection of NewNodes' clients must have been
// idle for go-redis to check it before a command.
const connCheckIdle = 100 * time.Millisecond

// idleConnCheck is a go-redis hook that wraps each new connection in a
// checkedConn. Idleness is measured on the system's monotonic clock, not a
// Client's: it concerns the sockets, which know no other.
type idleConnCheck struct {
	epoch time.Time // the origin of its connections' times
}

func (h idleConnCheck) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cc := &checkedConn{Conn: c, epoch: h.epoch}
		cc.sys, _ = c.(syscall.Conn)
		cc.used.Store(int64(time.Since(h.epoch)))
		return cc, nil
	}
}

func (idleConnCheck) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (idleConnCheck) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// checkedConn is a connection that go-redis's pool checks only when it has
// been idle for connCheckIdle; otherwise the check finds nothing to do. The
// pool checks it through SyscallConn, before taking it for a command.
type checkedConn struct {
	net.Conn
	sys   syscall.Conn // the connection's own, nil when it has none (TLS): never checked
	epoch time.Time
	used  atomic.Int64 // time since epoch of the last read or write, in ns
}

func (c *checkedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.used.Store(int64(time.Since(c.epoch)))
	return n, err
}

func (c *checkedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.used.Store(int64(time.Since(c.epoch)))
	return n, err
}

// SyscallConn returns the connection's raw connection when it has been idle
// for connCheckIdle, and one that checks nothing otherwise.
func (c *checkedConn) SyscallConn() (syscall.RawConn, error) {
	if c.sys != nil && time.Since(c.epoch)-time.Duration(c.used.Load()) >= connCheckIdle {
		return c.sys.SyscallConn()
	}
	return noCheck{}, nil
}

// noCheck is a syscall.RawConn on which every operation succeeds at once.
type noCheck struct{}

func (noCheck) Control(func(fd uintptr)) error           { return nil }
func (noCheck) Read(func(fd uintptr) (done bool)) error  { return nil }
func (noCheck) Write(func(fd uintptr) (done bool)) error { return nil }

// nodeInfo reports the addresses a node client talks to, and the ways its
// configuration works against the algorithm. It reports no such problem
// when derived is set: the Client's own client has the settings the
// algorithm relies on.
func nodeInfo(node redis.UniversalClient, timeout time.Duration, derived bool) (addrs []string, problems []string) {
	check := func(retries int, ctxTimeouts bool, read time.Duration) {
		if derived {
			return
		}
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

// sentinelAddr is the address go-redis reports for a client made by
// redis.NewFailoverClient.
const sentinelAddr = "FailoverClient"

// checkNodes checks the node clients and returns their names, logging a
// warning for each setting that works against the algorithm.
func checkNodes(nodes []redis.UniversalClient, cfg config) ([]string, error) {
	names := make([]string, len(nodes))
	seenAddr := map[string]int{}
	for i, n := range nodes {
		if v := reflect.ValueOf(n); n == nil || v.Kind() == reflect.Pointer && v.IsNil() {
			return nil, fmt.Errorf("redlock: nodes[%d] is nil", i)
		}
		if j := slices.Index(nodes[:i], n); j >= 0 {
			return nil, fmt.Errorf("redlock: nodes[%d] is the same client as nodes[%d]", i, j)
		}
		addrs, problems := nodeInfo(n, cfg.nodeTimeout, derivable(n, cfg) != nil)
		names[i] = fmt.Sprintf("node %d", i)
		if len(addrs) > 0 {
			names[i] = addrs[0]
		}
		if names[i] == sentinelAddr {
			// go-redis gives every Sentinel client this address: it names
			// no server, and two of them are different nodes.
			names[i], addrs = fmt.Sprintf("node %d (Sentinel)", i), nil
		}
		for _, a := range addrs {
			if j, dup := seenAddr[a]; dup {
				return nil, fmt.Errorf("redlock: nodes[%d] and nodes[%d] both address %s: the nodes must be independent masters", i, j, a)
			}
			seenAddr[a] = i
		}
		for _, p := range problems {
			cfg.log.Warn("redlock: node client configured against the lock algorithm", "node", names[i], "index", i, "problem", p)
		}
	}
	return names, nil
}

// derivable returns n as a *redis.Client when the Client makes a client of
// its own from n's options, and nil otherwise. That is when n is a plain
// client (not a Sentinel client) that NewNodes did not make (those have the
// library's settings already), and Options.NodeClientsAsGiven is not set.
func derivable(n redis.UniversalClient, cfg config) *redis.Client {
	c, ok := n.(*redis.Client)
	if !ok || cfg.asGiven || c.Options().Addr == sentinelAddr {
		return nil
	}
	if madeByNewNodes(c) {
		return nil
	}
	return c
}

// closeClients closes node clients and returns the errors other than
// "already closed".
func closeClients(clients []redis.UniversalClient) error {
	var err error
	for _, n := range clients {
		if cerr := n.Close(); cerr != nil && !errors.Is(cerr, redis.ErrClosed) {
			err = errors.Join(err, cerr)
		}
	}
	return err
}
