package test

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/redlock"
)

// guardWatch watches one deployment of fresh nodes for the restart guard,
// through what the Clients made for it see and through the nodes' state
// keys: a node is guarded when a round met it in its guard, or when its
// state is no longer the one it had once the deployment was established
// (the guard's end time g set again, or the state made anew).
type guardWatch struct {
	t      *testing.T
	addrs  []string
	direct []*redis.Client // plain clients that look at the nodes
	logs   syncBuffer      // every Client's log records

	established atomic.Bool
	states      []map[string]string // each node's state once established

	mu      sync.Mutex
	guarded map[int]bool // nodes met guarded once established
}

// watch returns a guardWatch of the nodes at addrs, before any Client.
func watch(t *testing.T, addrs []string) *guardWatch {
	t.Helper()
	w := &guardWatch{t: t, addrs: addrs, guarded: map[int]bool{}}
	for _, a := range addrs {
		d := redis.NewClient(&redis.Options{Addr: a, Protocol: 2})
		t.Cleanup(func() { _ = d.Close() })
		w.direct = append(w.direct, d)
	}
	return w
}

// options returns the Clients' options: the defaults (RestartGuard 1
// minute, NodeTimeout 50 ms), with the watch's logger and observer.
func (w *guardWatch) options() *redlock.Options {
	return &redlock.Options{
		Logger:   slog.New(slog.NewTextHandler(&w.logs, nil)),
		Observer: &redlock.Observer{End: w.end},
	}
}

// end notes the nodes that a round met in their guard once the deployment
// was established.
func (w *guardWatch) end(_ context.Context, e redlock.Event) {
	if !w.established.Load() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range e.Rounds {
		for i, v := range r.Nodes {
			if v.Outcome == redlock.VoteGuarded {
				w.guarded[i] = true
			}
		}
	}
}

// client returns a Client on nodes made with the watch's options, closed
// with the test. asGiven sets Options.NodeClientsAsGiven.
func (w *guardWatch) client(nodes []redis.UniversalClient, asGiven bool) *redlock.Client {
	w.t.Helper()
	o := w.options()
	o.NodeClientsAsGiven = asGiven
	c, err := redlock.New(nodes, o)
	require.NoError(w.t, err)
	w.t.Cleanup(func() { _ = c.Close() })
	return c
}

// clients returns n Clients on the same nodes.
func (w *guardWatch) clients(n int, nodes []redis.UniversalClient, asGiven bool) []*redlock.Client {
	w.t.Helper()
	var cs []*redlock.Client
	for range n {
		cs = append(cs, w.client(nodes, asGiven))
	}
	return cs
}

// nodes returns node clients on the watch's nodes made by redlock.NewNodes,
// closed with the test.
func (w *guardWatch) nodes() []redis.UniversalClient {
	nodes := redlock.NewNodes(w.addrs...)
	w.t.Cleanup(func() { closeAll(nodes) })
	return nodes
}

// plain returns a plain go-redis client per node made from options o
// returns for the node's address, closed with the test.
func (w *guardWatch) plain(o func(addr string) *redis.Options) []redis.UniversalClient {
	var nodes []redis.UniversalClient
	for _, a := range w.addrs {
		nodes = append(nodes, redis.NewClient(o(a)))
	}
	w.t.Cleanup(func() { closeAll(nodes) })
	return nodes
}

func closeAll(nodes []redis.UniversalClient) {
	for _, n := range nodes {
		_ = n.Close()
	}
}

// ping pings every node through nodes, as a service does to fail fast at
// start-up, from several goroutines at once, so that each client's pool
// keeps several connections that no Client's check has seen.
func (w *guardWatch) ping(nodes []redis.UniversalClient) {
	w.t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, 3*len(nodes))
	for i := range errs {
		wg.Go(func() { errs[i] = nodes[i%len(nodes)].Ping(w.t.Context()).Err() })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(w.t, err)
	}
}

// establish makes the deployment's first locks, one per Client at once,
// and records each node's state, which must come out of its guard: at once
// on the quorum that granted a first lock, and on the other nodes when the
// establishing requests still on their way arrive. From then on no node may
// be guarded.
func (w *guardWatch) establish(cs ...*redlock.Client) {
	w.t.Helper()
	w.lockAll(cs, len(cs), len(cs))
	w.states = make([]map[string]string, len(w.addrs))
	for i := range w.addrs {
		require.Eventually(w.t, func() bool { return w.state(i)["g"] == "0" }, 5*time.Second, 5*time.Millisecond,
			"node %d established: %v", i, w.state(i))
		w.states[i] = w.state(i)
	}
	w.established.Store(true)
}

// lockAll makes n locks of one key, workers at a time, through the Clients
// in turn, each unlocked at once, and fails the test with the first that
// fails (the others are then not made). Each Lock may take 10 s.
func (w *guardWatch) lockAll(cs []*redlock.Client, n, workers int) {
	w.t.Helper()
	var next atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n && first.Load() == nil; i = int(next.Add(1)) - 1 {
				if err := lockOnce(w.t.Context(), cs[i%len(cs)]); err != nil {
					first.CompareAndSwap(nil, fmt.Errorf("lock %d of %d (Client %d): %w", i, n, i%len(cs), err))
				}
			}
		})
	}
	wg.Wait()
	if err, _ := first.Load().(error); err != nil {
		w.t.Fatalf("%+v\nlogs:\n%s\nstates: %v", err, w.logs.String(), w.allStates())
	}
}

// lockOnce locks and unlocks the key "job" through c within 10 s.
func lockOnce(ctx context.Context, c *redlock.Client) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l, err := c.Lock(ctx, "job", 2*time.Second)
	if err != nil {
		return err
	}
	return l.Unlock(ctx)
}

// state returns node i's state key.
func (w *guardWatch) state(i int) map[string]string {
	w.t.Helper()
	st, err := w.direct[i].HGetAll(w.t.Context(), protocol.StateKey).Result()
	require.NoError(w.t, err)
	return st
}

// allStates returns every node's state key, for failure messages.
func (w *guardWatch) allStates() []map[string]string {
	var sts []map[string]string
	for i := range w.addrs {
		sts = append(sts, w.state(i))
	}
	return sts
}

var replidRe = regexp.MustCompile(`master_replid:(\w+)`)

// replid returns the replication ID of node i's server.
func (w *guardWatch) replid(i int) string {
	w.t.Helper()
	info, err := w.direct[i].Info(w.t.Context(), "replication").Result()
	require.NoError(w.t, err)
	m := replidRe.FindStringSubmatch(info)
	require.NotNil(w.t, m, info)
	return m[1]
}

// guardedNodes returns the nodes guarded since the deployment was
// established: met guarded by a round, or whose state is not the one
// recorded then (its guard's end g or its id changed).
func (w *guardWatch) guardedNodes() []int {
	w.t.Helper()
	var out []int
	for i := range w.addrs {
		st := w.state(i)
		w.mu.Lock()
		met := w.guarded[i]
		w.mu.Unlock()
		if met || st["g"] != "0" || st["id"] != w.states[i]["id"] {
			out = append(out, i)
		}
	}
	return out
}

// requireHealthy fails the test when a node was guarded since the
// deployment was established, when a node's state no longer names its
// server, or when a Client logged a warning or an error.
func (w *guardWatch) requireHealthy() {
	w.t.Helper()
	require.True(w.t, w.established.Load(), "the scenario established the deployment")
	require.Empty(w.t, w.guardedNodes(), "nodes guarded although none lost anything\nlogs:\n%s\nstates before: %v\nstates now: %v",
		w.logs.String(), w.states, w.allStates())
	for i := range w.addrs {
		require.Equal(w.t, w.replid(i), w.state(i)["r"], "node %d's state names its server", i)
	}
	require.NotRegexp(w.t, `level=(WARN|ERROR)`, w.logs.String())
}

// killClients closes every normal client connection on every node (CLIENT
// KILL TYPE normal), and the pub/sub ones too when pubsub is set, as a
// server restart that keeps its data, a proxy or a network would.
func (w *guardWatch) killClients(pubsub bool) {
	w.t.Helper()
	kinds := []string{"normal"}
	if pubsub {
		kinds = append(kinds, "pubsub")
	}
	for _, d := range w.direct {
		for _, k := range kinds {
			require.NoError(w.t, d.ClientKillByFilter(w.t.Context(), "TYPE", k).Err())
		}
	}
}

// only returns the nodes of want, sorted, for comparing with guardedNodes.
func only(want ...int) []int { return slices.Sorted(slices.Values(want)) }
