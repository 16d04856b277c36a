package redisproc

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/testkit/faultproxy"
)

// Group is one replicated node: a master and a replica that replicates
// through a fault proxy, so that a test can hold replication back and then
// fail the master over to a replica that lacks its latest writes. With a
// Sentinel, the Sentinel monitors the master under Name and does the
// failover itself.
type Group struct {
	Name     string // the master's name at the Sentinel
	Master   string // the first master's address
	Replica  string // the replica's address (the master after a failover)
	Sentinel string // the Sentinel's address; "" without one

	servers *Servers
	link    *faultproxy.Proxy // the replica's way to the master
}

// StartGroup starts a master, a replica of it, and, when sentinel is set, a
// Sentinel (quorum 1, down after 500 ms) that monitors it as name. It waits
// until the replica is in sync and the Sentinel knows the replica. On
// failure it stops what it started.
func StartGroup(ctx context.Context, name string, sentinel bool) (g *Group, err error) {
	s, err := newServers(ctx)
	if err != nil {
		return nil, err
	}
	g = &Group{Name: name, servers: s}
	defer func() {
		if err != nil {
			g.Stop()
			g = nil
		}
	}()
	if _, err := s.launch(ctx); err != nil {
		return nil, err
	}
	g.Master = s.Addrs[0]
	if g.link, err = faultproxy.NewProxy(g.Master); err != nil {
		return nil, err
	}
	host, port, _ := strings.Cut(g.link.Addr(), ":")
	if _, err := s.launch(ctx, "--replicaof", host, port); err != nil {
		return nil, err
	}
	g.Replica = s.Addrs[1]
	if err := g.waitInSync(ctx); err != nil {
		return nil, err
	}
	if sentinel {
		return g, g.startSentinel(ctx)
	}
	return g, nil
}

// waitInSync waits up to 10 s until the replica's link to the master is up.
func (g *Group) waitInSync(ctx context.Context) error {
	return poll(ctx, 10*time.Second, func() error {
		info, err := reply(g.Replica, "INFO", "replication")
		if err == nil && !strings.Contains(info, "master_link_status:up") {
			err = fmt.Errorf("replica %s not in sync", g.Replica)
		}
		return err
	})
}

// startSentinel starts the Sentinel and waits until it knows the replica.
func (g *Group) startSentinel(ctx context.Context) error {
	host, port, _ := strings.Cut(g.Master, ":")
	conf := filepath.Join(g.servers.dir, "sentinel.conf")
	text := fmt.Sprintf("sentinel monitor %[1]s %[2]s %[3]s 1\n"+
		"sentinel down-after-milliseconds %[1]s 500\n"+
		"sentinel failover-timeout %[1]s 5000\n", g.Name, host, port)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		return err
	}
	i, err := g.servers.launch(ctx, conf, "--sentinel")
	if err != nil {
		return err
	}
	g.Sentinel = g.servers.Addrs[i]
	sc := redis.NewSentinelClient(&redis.Options{Addr: g.Sentinel})
	defer sc.Close()
	return poll(ctx, 20*time.Second, func() error {
		rs, err := sc.Replicas(ctx, g.Name).Result()
		if err != nil {
			return err
		}
		for _, r := range rs {
			if r["ip"]+":"+r["port"] == g.Replica && !strings.Contains(r["flags"], "down") && !strings.Contains(r["flags"], "disconnected") {
				return nil
			}
		}
		return fmt.Errorf("sentinel %s does not know replica %s yet: %v", g.Sentinel, g.Replica, rs)
	})
}

// HoldReplication stalls the replication stream: the master's writes from
// now on reach the replica only after [Group.ResumeReplication], or never
// when the master dies first ([Group.KillMaster]).
func (g *Group) HoldReplication() { g.link.Partition() }

// ResumeReplication delivers the held writes and lets later ones flow.
func (g *Group) ResumeReplication() { g.link.Heal() }

// KillMaster kills the master (SIGKILL) and drops the writes held back from
// the replica with it.
func (g *Group) KillMaster() {
	g.servers.Kill(0)
	g.link.SetTarget("")
	g.link.Cut()
}

// Promote makes the replica a master (REPLICAOF NO ONE), as an operator or a
// managed service's failover would.
func (g *Group) Promote() error {
	return command(g.Replica, "REPLICAOF", "NO", "ONE")
}

// WaitFailover waits up to 20 s until the Sentinel names the replica as the
// master and the replica says it is one.
func (g *Group) WaitFailover(ctx context.Context) error {
	sc := redis.NewSentinelClient(&redis.Options{Addr: g.Sentinel})
	defer sc.Close()
	return poll(ctx, 20*time.Second, func() error {
		addr, err := sc.GetMasterAddrByName(ctx, g.Name).Result()
		if err != nil {
			return err
		}
		if len(addr) != 2 || addr[0]+":"+addr[1] != g.Replica {
			return fmt.Errorf("sentinel %s names %v as the master of %s", g.Sentinel, addr, g.Name)
		}
		info, err := reply(g.Replica, "INFO", "replication")
		if err == nil && !strings.Contains(info, "role:master") {
			err = fmt.Errorf("replica %s is not a master yet", g.Replica)
		}
		return err
	})
}

// Stop stops every process of the group and its proxy. Calling it again
// does nothing.
func (g *Group) Stop() {
	if g.link != nil {
		_ = g.link.Close()
	}
	g.servers.Stop()
}

// poll calls f every 50 ms until it returns nil, ctx ends or d has passed;
// then it returns f's last error.
func poll(ctx context.Context, d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("redisproc: after %v: %w", d, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
