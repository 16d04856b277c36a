package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/redlock"
)

// embeddedNodes is the default number of in-process nodes.
const embeddedNodes = 5

// nodesUsage describes the flag --nodes.
const nodesUsage = "comma-separated Redis masters, each host:port or a redis:// or rediss:// URL"

// nodeHelp says what a NODE of --nodes NODE,... may be.
const nodeHelp = `
NODE is host:port, or redis://[user:password@]host[:port][/db], or
rediss://... for TLS. The output names each node by its host:port.
`

// parseNodes splits a --nodes value into addresses, and checks each as
// redlock.Open does. An address is host:port or a redis:// or rediss://
// URL. It returns the addresses, for redlock.NewNodes, with their names.
// A name is the node's host:port, which the output shows instead of a URL
// and its password. Two addresses of one host:port are refused.
func parseNodes(s string) (addrs, names []string, err error) {
	seen := map[string]bool{}
	for _, a := range strings.Split(s, ",") {
		a = strings.TrimSpace(a)
		o, err := redlock.ParseNode(a)
		if err != nil {
			return nil, nil, usagef("--nodes: %s", strings.TrimPrefix(err.Error(), "redlock: "))
		}
		if seen[o.Addr] {
			return nil, nil, usagef("--nodes: %s is listed twice; the nodes must be independent masters", o.Addr)
		}
		seen[o.Addr] = true
		addrs, names = append(addrs, a), append(names, o.Addr)
	}
	return addrs, names, nil
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

// dialNodes returns a node client per address after checking that every
// node answers PING. An error names the node by its name in names.
func dialNodes(ctx context.Context, addrs, names []string) ([]redis.UniversalClient, error) {
	nodes := redlock.NewNodes(addrs...)
	for i, n := range nodes {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := n.Ping(pctx).Err()
		cancel()
		if err != nil {
			closeNodes(nodes)
			return nil, fmt.Errorf("node %s unreachable: %v", names[i], err)
		}
	}
	return nodes, nil
}

func closeNodes(nodes []redis.UniversalClient) {
	for _, n := range nodes {
		_ = n.Close()
	}
}
