package locktest

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/redquorum/redquorum/internal/testkit/faultproxy"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// Cluster is N independent Redis masters. Each is a native redis-server
// process without persistence, behind an in-process proxy. Start it with
// [Start].
type Cluster struct {
	Nodes   []*Node
	Version string // the servers' version, such as "7.0.15"

	mu    sync.Mutex
	links []*faultproxy.Proxy // the proxies of every View
}

// Node is one node of a [Cluster]. Clients reach it at [Node.Addr], the
// address of its proxy, where the network faults act. Its methods are safe
// for concurrent use. Two faults on one node at once rarely make sense,
// though.
type Node struct {
	name  string
	proxy *faultproxy.Proxy

	mu      sync.Mutex
	servers [2]*redisproc.Servers // one server each: the master is servers[cur], its replica (or nil) the other
	cur     int
	link    *faultproxy.Proxy // the replica's way to the master; nil without a replica
	paused  bool
}

// master returns the node's current master server. n.mu is held, or the
// node is not shared yet.
func (n *Node) master() *redisproc.Servers { return n.servers[n.cur] }

// Start starts n nodes as [New] does, and stops them in t.Cleanup, also when
// the test fails. It fails t when New fails. When redis-server is not
// installed, Start skips t, or fails it when the environment variable CI is
// "true".
func Start(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	redisproc.Require(t)
	c, err := New(t.Context(), n, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// New starts n redis-server processes without persistence on free ports of
// 127.0.0.1, with a proxy in front of each. Stop them with [Cluster.Close].
// On failure New stops what it started. On Linux none outlives a killed
// test binary: the kernel kills the servers when their parent dies.
func New(ctx context.Context, n int, opts ...Option) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("locktest: %d nodes; want at least 1", n)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	c := &Cluster{Nodes: make([]*Node, n)}
	var g errgroup.Group
	for i := range c.Nodes {
		g.Go(func() error {
			s, err := redisproc.Start(ctx, 1)
			if err != nil {
				return err
			}
			nd := &Node{name: fmt.Sprintf("node%d", i), servers: [2]*redisproc.Servers{s}}
			c.Nodes[i] = nd
			if nd.proxy, err = faultproxy.NewProxy(s.Addrs[0]); err != nil || !o.replicas {
				return err
			}
			return nd.addReplica(ctx)
		})
	}
	if err := g.Wait(); err != nil {
		c.Close()
		return nil, fmt.Errorf("locktest: starting %d nodes: %w", n, err)
	}
	c.Version = c.Nodes[0].master().Version
	return c, nil
}

// Close stops every server, paused ones included, and closes every proxy.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		if n == nil {
			continue
		}
		_ = n.Unpause() // a stopped process would not handle SIGTERM
		for _, p := range []*faultproxy.Proxy{n.proxy, n.link} {
			if p != nil {
				_ = p.Close()
			}
		}
		for _, s := range n.servers {
			if s != nil {
				s.Stop()
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.links {
		_ = l.Close()
	}
}

// Addrs returns the address of each node, for the client under test.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Targets returns the nodes as schedule targets, for [Schedule.Run].
func (c *Cluster) Targets() []Target {
	ts := make([]Target, len(c.Nodes))
	for i, n := range c.Nodes {
		ts[i] = n
	}
	return ts
}

// View returns one client's own way to the nodes. That is an address per
// node, through a proxy of the view's own in front of the node's. It also
// returns the links a ClientPartition cuts (see Schedule.Views). The proxies
// are closed with the cluster. On failure View closes what it opened.
func (c *Cluster) View() (addrs []string, links []Link, err error) {
	var opened []*faultproxy.Proxy
	for _, n := range c.Nodes {
		px, err := faultproxy.NewProxy(n.Addr())
		if err != nil {
			for _, p := range opened {
				_ = p.Close()
			}
			return nil, nil, err
		}
		opened = append(opened, px)
		addrs, links = append(addrs, px.Addr()), append(links, px)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.links = append(c.links, opened...)
	return addrs, links, nil
}

// Name returns the node's name: "node0", "node1", ...
func (n *Node) Name() string { return n.name }

// Addr returns the address clients dial: the node's proxy.
func (n *Node) Addr() string { return n.proxy.Addr() }

// Kill kills the node's server (SIGKILL), as a crash would. The node stays
// down, refusing connections, until [Node.Start].
func (n *Node) Kill(context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.master().Kill(0)
	n.paused = false
	n.proxy.Cut()
	return nil
}

// Start starts the node's server again, without its data, and waits until
// it accepts connections. A server that is up is killed first. On failure
// the node is left down.
func (n *Node) Start(ctx context.Context) error {
	return n.Restart(ctx, false)
}

// Restart restarts the node's server, which then has a new replication ID.
// With keepData the server, which must be up, writes a snapshot and loads it
// again. That is a clean restart with persistence: keys whose TTL ran out
// meanwhile are gone. Without keepData the server is killed and comes back
// empty, as after a crash without persistence. On failure the node is left
// down.
func (n *Node) Restart(ctx context.Context, keepData bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cont()
	var err error
	if keepData {
		err = n.master().RestartWithData(ctx, 0)
	} else {
		err = n.master().Restart(ctx, 0)
	}
	n.proxy.Cut()
	if err != nil {
		return fmt.Errorf("locktest: restarting %s: %w", n.name, err)
	}
	return nil
}

// Pause stops the node's server (SIGSTOP). Connections stay open and
// requests wait, as during a long garbage collection or a frozen VM.
func (n *Node) Pause() error { return n.signal(syscall.SIGSTOP, true) }

// Unpause resumes a paused server (SIGCONT). Without a pause it does nothing.
func (n *Node) Unpause() error { return n.signal(syscall.SIGCONT, false) }

func (n *Node) signal(sig syscall.Signal, pause bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !pause {
		n.cont()
		return nil
	}
	pid := n.master().PIDs()[0]
	if pid == 0 {
		return fmt.Errorf("locktest: pausing %s: the server is down", n.name)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("locktest: pausing %s: %w", n.name, err)
	}
	n.paused = true
	return nil
}

// cont resumes the server if it is paused. n.mu is held.
func (n *Node) cont() {
	if pid := n.master().PIDs()[0]; n.paused && pid != 0 {
		_ = syscall.Kill(pid, syscall.SIGCONT)
	}
	n.paused = false
}

// Partition cuts the node off from every client. New connections are
// accepted but not forwarded, and bytes on open ones are held until
// [Node.Heal]. Clients see timeouts, never errors.
func (n *Node) Partition() { n.proxy.Partition() }

// Heal ends a partition. Held bytes are delivered in order.
func (n *Node) Heal() { n.proxy.Heal() }

// SetLatency delays the node's traffic by d each way. 0 removes the delay.
func (n *Node) SetLatency(d time.Duration) { n.proxy.SetLatency(d, d) }

// SetLatencies delays the node's traffic by up on the way to the server and
// by down on the way back.
func (n *Node) SetLatencies(up, down time.Duration) { n.proxy.SetLatency(up, down) }
