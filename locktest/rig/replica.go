package rig

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// replicaArgs are the redis-server arguments of a replicated node's
// containers, after defaultArgs: a replica loads the master's data from the
// socket, since an RDB file it wrote to disk would be loaded again when its
// container starts as a master that must come up empty; and a master starts
// a sync at once instead of waiting 5 s for more replicas.
var replicaArgs = []string{"--repl-diskless-load", "swapdb", "--repl-diskless-sync-delay", "0"}

// WithReplicas gives every node a replica: a second container on the
// cluster's network that replicates from the node's master by container
// name. Clients still reach only the master, through the proxy; Kill, Start,
// Restart and Pause act on the master, and [Node.Failover] swaps the two.
// Start returns once every replica is in sync. The rig sends the replicas
// REPLICAOF and INFO as the default user, so do not combine WithReplicas
// with [WithArgs] that restrict that user.
//
// Every container starts as a master, and the rig makes one a replica with
// REPLICAOF: a container started again keeps its command line, so a
// --replicaof there would make a restarted master come back as a replica.
func WithReplicas() Option {
	return func(c *config) { c.replicas = true }
}

// Failover fails the node over to its replica, which lacks the master's
// latest writes, as an asynchronous replica promoted after a crash does:
//
//  1. once the replica has every write the master had when Failover was
//     called, REPLICAOF NO ONE makes it a master with a new replication ID
//     and the data it has at this moment;
//  2. for lag, clients keep writing to the old master through the proxy:
//     those writes are lost;
//  3. the old master is killed (SIGKILL);
//  4. the proxy is pointed at the promoted replica and its open connections
//     are cut, so that [Node.Addr] reaches the new master;
//  5. the old master's container starts again, empty (no persistence), as a
//     replica of the new master, and Failover returns once it is in sync.
//
// The roles are then swapped: Kill, Start, Pause and the next Failover act
// on the new master. Clients see their connections closed during step 4 and
// nothing else. Failover on a node without a replica returns an error. On
// failure the node may be left in any of these steps.
func (n *Node) Failover(ctx context.Context, lag time.Duration) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.replica == nil {
		return fmt.Errorf("rig: failover of %s: the node has no replica (start the cluster WithReplicas)", n.name)
	}
	if err := n.waitReplicated(ctx, true); err != nil {
		return fmt.Errorf("rig: failover of %s: %w", n.name, err)
	}
	if _, err := command(ctx, n.replica.addr, "REPLICAOF", "NO", "ONE"); err != nil {
		return fmt.Errorf("rig: failover of %s: promote %s: %w", n.name, n.replica.name, err)
	}
	select {
	case <-ctx.Done():
		return fmt.Errorf("rig: failover of %s: %w", n.name, ctx.Err())
	case <-time.After(lag):
	}
	if err := n.kill(ctx); err != nil {
		return err
	}
	n.master, n.replica = n.replica, n.master
	n.proxy.SetTarget(n.master.addr)
	n.proxy.Cut()
	if err := n.replica.start(ctx); err != nil {
		return err
	}
	return n.follow(ctx)
}

// ReplicaAddr returns the address on 127.0.0.1 of the node's current
// replica, reached directly and not through the proxy, or "" when the node
// has no replica.
func (n *Node) ReplicaAddr() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.replica == nil {
		return ""
	}
	return n.replica.addr
}

// WaitReplicated waits until the node's replica has every write the master
// had when WaitReplicated was called, or ctx ends. A node without a replica
// returns at once.
func (n *Node) WaitReplicated(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.replica == nil {
		return nil
	}
	if err := n.waitReplicated(ctx, true); err != nil {
		return fmt.Errorf("rig: %s: %w", n.name, err)
	}
	return nil
}

// follow makes the replica replicate from the master and waits until its
// link is up (the initial sync is done).
func (n *Node) follow(ctx context.Context) error {
	if _, err := command(ctx, n.replica.addr, "REPLICAOF", n.master.name, "6379"); err != nil {
		return fmt.Errorf("rig: %s: REPLICAOF %s: %w", n.replica.name, n.master.name, err)
	}
	if err := n.waitReplicated(ctx, false); err != nil {
		return fmt.Errorf("rig: %s: %w", n.name, err)
	}
	return nil
}

// waitReplicated waits up to readyTimeout until the replica's link to the
// master is up and, with offset, until the replica has reached the master's
// replication offset as of now.
func (n *Node) waitReplicated(ctx context.Context, offset bool) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	want := int64(0)
	if offset {
		info, err := command(ctx, n.master.addr, "INFO", "replication")
		if err != nil {
			return fmt.Errorf("INFO on %s: %w", n.master.name, err)
		}
		if want, err = infoInt(info, "master_repl_offset"); err != nil {
			return fmt.Errorf("%s: %w", n.master.name, err)
		}
	}
	for {
		info, err := command(ctx, n.replica.addr, "INFO", "replication")
		if err == nil && !strings.Contains(info, "master_link_status:up") {
			err = errors.New("link to the master is down")
		}
		if err == nil {
			var got int64
			if got, err = infoInt(info, "slave_repl_offset"); err == nil && got < want {
				err = fmt.Errorf("offset %d of %d", got, want)
			}
		}
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replica %s not in sync: %w (%w)", n.replica.name, err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// infoInt returns the integer field name of an INFO reply.
func infoInt(info, name string) (int64, error) {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO has no %s", name)
}

// command sends one command on a new connection to addr, within 5 s, and
// returns its reply (see redisproc.Do).
func command(ctx context.Context, addr string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return redisproc.Do(ctx, addr, args...)
}
