package redisproc

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// StartCluster starts one Redis Cluster of n masters (no replicas, no
// persistence), the hash slots split evenly between them in order, and
// waits until every master reports the cluster ok and knows every other.
// Addrs lists the masters; any of them is a seed for a cluster client.
func StartCluster(ctx context.Context, n int) (*Servers, error) {
	s, err := start(ctx, n, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000")
	if err != nil {
		return nil, err
	}
	const slots = 16384
	for i, a := range s.Addrs {
		lo, hi := i*slots/n, (i+1)*slots/n-1
		if err := command(a, "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(lo), strconv.Itoa(hi)); err != nil {
			s.Stop()
			return nil, err
		}
		if i > 0 {
			host, port, _ := net.SplitHostPort(s.Addrs[0])
			if err := command(a, "CLUSTER", "MEET", host, port); err != nil {
				s.Stop()
				return nil, err
			}
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range s.Addrs {
		for {
			info, err := reply(a, "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)+"\r") {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				s.Stop()
				return nil, fmt.Errorf("redisproc: cluster of %d on %v not ok after 20s: %q, %v", n, s.Addrs, info, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return s, nil
}
