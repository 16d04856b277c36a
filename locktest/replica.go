package locktest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redquorum/redquorum/internal/testkit/faultproxy"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// An Option configures [Start] and [New].
type Option func(*options)

type options struct {
	replicas bool
}

// WithReplicas gives each node a replica, so that [Node.Failover] can fail
// the node over to a replica that lacks the newest writes. The replica is a
// second redis-server. It replicates from the master through a proxy of its
// own, which clients do not reach.
func WithReplicas() Option { return func(o *options) { o.replicas = true } }

// ErrNoReplica is returned by [Node.Failover] on a node without a replica.
var ErrNoReplica = errors.New("locktest: the node has no replica to fail over to")

// addReplica starts the node's replica and waits until it is in sync. The
// node is not shared yet.
func (n *Node) addReplica(ctx context.Context) error {
	s, err := redisproc.Start(ctx, 1)
	if err != nil {
		return err
	}
	n.servers[1] = s
	if n.link, err = faultproxy.NewProxy(n.master().Addrs[0]); err != nil {
		return err
	}
	return n.follow(ctx, s.Addrs[0])
}

// follow makes the server at addr a replica of the master through the link
// and waits up to 10 s until it is in sync. The master starts the full
// synchronisation at once, not after Redis's default delay of 5 s.
func (n *Node) follow(ctx context.Context, addr string) error {
	if _, err := redisproc.Do(ctx, n.master().Addrs[0], "CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
		return err
	}
	host, port, _ := strings.Cut(n.link.Addr(), ":")
	if _, err := redisproc.Do(ctx, addr, "REPLICAOF", host, port); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := redisproc.Do(ctx, addr, "INFO", "replication")
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("locktest: the replica of %s is not in sync after 10s (%v)", n.name, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ReplicaAddr returns the address of the node's replica, which clients do
// not use, or "" without one.
func (n *Node) ReplicaAddr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if r := n.servers[1-n.cur]; r != nil {
		return r.Addrs[0]
	}
	return ""
}

// Failover fails the node over to its replica, losing the writes made in
// the last lag. It returns [ErrNoReplica] without [WithReplicas]. On failure the
// node may be left down. Failover acts as a failover to a lagging
// asynchronous replica. Replication is held back for lag while clients keep
// writing to the master. Then the master is killed, the replica is promoted
// (REPLICAOF NO ONE), and the node's address leads to it. The old master
// starts again, empty, as the new replica. The next Failover swaps the two
// back. Pause, Kill and Restart act on the current master.
func (n *Node) Failover(ctx context.Context, lag time.Duration) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	old := n.cur
	replica := n.servers[1-old]
	if replica == nil {
		return fmt.Errorf("%w: %s", ErrNoReplica, n.name)
	}
	n.cont()
	n.link.Partition()
	time.Sleep(lag)
	n.servers[old].Kill(0)
	n.link.SetTarget("")
	n.link.Cut()
	n.link.Heal()
	if _, err := redisproc.Do(ctx, replica.Addrs[0], "REPLICAOF", "NO", "ONE"); err != nil {
		return fmt.Errorf("locktest: promoting the replica of %s: %w", n.name, err)
	}
	n.proxy.SetTarget(replica.Addrs[0])
	n.proxy.Cut()
	n.cur = 1 - old
	n.link.SetTarget(replica.Addrs[0])
	if err := n.servers[old].Restart(ctx, 0); err != nil {
		return fmt.Errorf("locktest: restarting the old master of %s as its replica: %w", n.name, err)
	}
	return n.follow(ctx, n.servers[old].Addrs[0])
}
