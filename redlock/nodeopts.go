package redlock

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

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
//     per command that nothing here needs;
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
// been closed unnoticed, and the check costs a deadline reset, a system
// call and allocations on every command. A connection that was closed while idle for less than that
// fails its next command, once, which a round tolerates like any other
// failure of a minority of nodes.
func NewNodes(addrs ...string) []redis.UniversalClient {
	nodes := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		c := redis.NewClient(NodeOptions(a))
		c.AddHook(idleConnCheck{epoch: time.Now()})
		nodes[i] = c
	}
	return nodes
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

// checkedConn is a connection that go-redis's pool checks (through
// SyscallConn, before taking it for a command) only when it has been idle
// for connCheckIdle; otherwise the check finds nothing to do.
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
