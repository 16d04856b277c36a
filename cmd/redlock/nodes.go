package main

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/redlock"
)

// embeddedNodes is the default number of in-process nodes.
const embeddedNodes = 5

// parseNodes splits a --nodes value into addresses and checks each.
func parseNodes(s string) ([]string, error) {
	var addrs []string
	seen := map[string]bool{}
	for _, a := range strings.Split(s, ",") {
		a = strings.TrimSpace(a)
		if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
			return nil, usagef("--nodes: %q is not host:port", a)
		}
		if seen[a] {
			return nil, usagef("--nodes: %s is listed twice; the nodes must be independent masters", a)
		}
		seen[a] = true
		addrs = append(addrs, a)
	}
	return addrs, nil
}

// embedded starts n in-process Redis-protocol nodes whose TTLs run down in
// real time.
func embedded(n int) ([]*miniredis.Miniredis, []string, error) {
	var srvs []*miniredis.Miniredis
	var addrs []string
	for range n {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			stopAll(srvs)
			return nil, nil, fmt.Errorf("starting an in-process node: %w", err)
		}
		m.ClockTTL(true)
		srvs = append(srvs, m)
		addrs = append(addrs, m.Addr())
	}
	return srvs, addrs, nil
}

func stopAll(srvs []*miniredis.Miniredis) {
	for _, m := range srvs {
		m.Close()
	}
}

// dialNodes returns a node client per address after checking that every node
// answers PING.
func dialNodes(ctx context.Context, addrs []string) ([]redis.UniversalClient, error) {
	nodes := redlock.NewNodes(addrs...)
	for i, n := range nodes {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := n.Ping(pctx).Err()
		cancel()
		if err != nil {
			closeNodes(nodes)
			return nil, fmt.Errorf("node %s unreachable: %v", addrs[i], err)
		}
	}
	return nodes, nil
}

func closeNodes(nodes []redis.UniversalClient) {
	for _, n := range nodes {
		_ = n.Close()
	}
}
