package test

// The operations matrix: what operators and servers do to the masters of a
// deployment, on native redis-server processes. An operation that loses
// no lock key must never start a node's restart guard; an event that loses
// lock keys must, and no second client may then obtain a lock still held.

import (
	"context"
	"log/slog"
	"maps"
	"net"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/faultproxy"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
	"github.com/redquorum/redquorum/redlock"
)

const (
	// opsGuard is the Clients' RestartGuard: long enough to watch a lock
	// held through a loss, short enough for a quick suite.
	opsGuard = 6 * time.Second
	// opsTTL is the TTL of the locks held through a loss, below opsGuard.
	opsTTL = 5 * time.Second
)

// opsRig is a deployment of five masters and what its Clients saw: the
// nodes met in their restart guard once watching began.
type opsRig struct {
	t      *testing.T
	s      *redisproc.Servers // the masters, or the first four with a group
	addrs  []string           // the nodes' addresses: node 4's is moved's with a group
	direct []*redis.Client    // a plain client per server of s

	g     *redisproc.Group  // node 4 with a group, else nil
	moved *faultproxy.Proxy // node 4's address, moved to the replica by a failover

	logs     syncBuffer // every Client's log records
	watching atomic.Bool
	mu       sync.Mutex
	guarded  map[int][]string // node → how it was met in its guard
	votes    map[int]map[redlock.VoteOutcome]int
}

// startOpsRig starts five masters, each with a configuration file and the
// DEBUG command. With group set, node 4 is instead a master with a replica
// whose replication the test can hold back, behind an address that a
// failover moves.
func startOpsRig(t *testing.T, group bool) *opsRig {
	t.Helper()
	redisproc.Require(t)
	n := 5
	if group {
		n = 4
	}
	s, err := redisproc.StartWith(t.Context(), n,
		"--enable-debug-command", "yes", "--repl-diskless-sync-delay", "0")
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	r := &opsRig{t: t, s: s, addrs: slices.Clone(s.Addrs), guarded: map[int][]string{}, votes: map[int]map[redlock.VoteOutcome]int{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the Clients' logs:\n%s", r.logs.String())
		}
	})
	for _, a := range s.Addrs {
		d := redis.NewClient(&redis.Options{Addr: a, Protocol: 2})
		t.Cleanup(func() { _ = d.Close() })
		r.direct = append(r.direct, d)
	}
	if group {
		r.g, err = redisproc.StartGroup(t.Context(), "n4", false)
		require.NoError(t, err)
		t.Cleanup(r.g.Stop)
		r.moved = proxyTo(t, r.g.Master)
		r.addrs = append(r.addrs, r.moved.Addr())
	}
	return r
}

// options returns the Clients' options: fenced locks, the restart guard
// opsGuard (off when unsafely is set), the rig's observer and its logs.
func (r *opsRig) options(unsafely bool) *redlock.Options {
	o := &redlock.Options{Fencing: true, RestartGuard: opsGuard, NodeTimeout: 500 * time.Millisecond,
		Observer: &redlock.Observer{Node: r.node, End: r.end}, Logger: slog.New(slog.NewTextHandler(&r.logs, nil))}
	if unsafely {
		o.RestartGuard, o.UnsafeNoRestartGuard = 0, true
	}
	return o
}

// node notes the nodes that a Client reports as entering their guard.
func (r *opsRig) node(_ context.Context, e redlock.NodeEvent) {
	if e.Change == redlock.GuardEntered {
		r.met(e.Index, "GuardEntered")
	}
}

// end counts the nodes' answers to rounds, and notes the nodes that
// answered from their guard.
func (r *opsRig) end(_ context.Context, e redlock.Event) {
	for _, rd := range e.Rounds {
		for i, v := range rd.Nodes {
			if v.Outcome == redlock.VoteGuarded {
				r.met(i, string(e.Op)+" "+strings.Join(e.Keys, ",")+": "+v.Err.Error())
			}
			if r.watching.Load() {
				r.mu.Lock()
				if r.votes[i] == nil {
					r.votes[i] = map[redlock.VoteOutcome]int{}
				}
				r.votes[i][v.Outcome]++
				r.mu.Unlock()
			}
		}
	}
}

// countAnew forgets the answers counted so far.
func (r *opsRig) countAnew() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.votes)
}

// answered returns how many times node i answered o since watch or
// countAnew.
func (r *opsRig) answered(i int, o redlock.VoteOutcome) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.votes[i][o]
}

func (r *opsRig) met(i int, how string) {
	if !r.watching.Load() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.guarded[i] = append(r.guarded[i], how)
}

// watch begins watching for guards: call it once the deployment is
// established, since every node of a brand-new deployment starts guarded.
func (r *opsRig) watch() { r.watching.Store(true) }

// guardedNodes returns the nodes met in their guard since watch, sorted,
// and how each was met.
func (r *opsRig) guardedNodes() ([]int, map[int][]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.guarded)), maps.Clone(r.guarded)
}

// client returns a Client on node clients of its own (fresh connections,
// each checked before its first lock command), closed with the test.
func (r *opsRig) client(unsafely bool) *redlock.Client {
	r.t.Helper()
	nodes := redlock.NewNodes(r.addrs...)
	c, err := redlock.New(nodes, r.options(unsafely))
	require.NoError(r.t, err)
	r.t.Cleanup(func() {
		_ = c.Close()
		closeAll(nodes)
	})
	return c
}

// holder returns a Client whose requests to chosen nodes the test can cut
// (see lockClient.lockOn), closed with the test.
func (r *opsRig) holder(unsafely bool) *lockClient {
	r.t.Helper()
	nodes := redlock.NewNodes(r.addrs...)
	lc := &lockClient{}
	for _, n := range nodes {
		h := &cutHook{}
		n.AddHook(h)
		lc.cuts = append(lc.cuts, h)
	}
	o := r.options(unsafely)
	o.NodeClientsAsGiven = true // through the cut hooks
	c, err := redlock.New(nodes, o)
	require.NoError(r.t, err)
	r.t.Cleanup(func() {
		_ = c.Close()
		closeAll(nodes)
	})
	lc.Client = c
	return lc
}

// establish makes the deployment's first lock through c: a brand-new
// deployment locks at once.
func (r *opsRig) establish(c *redlock.Client) {
	r.t.Helper()
	l, err := c.TryLock(r.t.Context(), "warm-up", time.Second)
	require.NoError(r.t, err, "a brand-new deployment locks at once")
	require.NoError(r.t, l.Unlock(r.t.Context()))
}

// fencedLocks locks and unlocks four keys in turn through c, each with a
// single round (TryLock: a refusing node is not waited for), and requires
// each fence to be above the one before, from last on. It returns the
// last fence.
func (r *opsRig) fencedLocks(c *redlock.Client, last uint64, who string) uint64 {
	r.t.Helper()
	for _, k := range []string{"k", "a", "b", "k"} {
		l, err := c.TryLock(r.t.Context(), k, 2*time.Second)
		require.NoError(r.t, err, "%s: %+v", who, err)
		require.Greater(r.t, l.Fence(), last, "%s: the fence of %q", who, k)
		last = l.Fence()
		require.NoError(r.t, l.Unlock(r.t.Context()))
	}
	return last
}

var replidOpsRe = regexp.MustCompile(`(?m)^master_replid:(\w+)`)

// info returns the field of INFO that re captures on the server at addr.
func (r *opsRig) info(addr, section string, re *regexp.Regexp) string {
	r.t.Helper()
	text, err := redisproc.Do(r.t.Context(), addr, "INFO", section)
	require.NoError(r.t, err)
	m := re.FindStringSubmatch(text)
	require.NotNil(r.t, m, "%s: INFO %s: %s", addr, section, text)
	return m[1]
}

func (r *opsRig) replid(i int) string { return r.info(r.s.Addrs[i], "replication", replidOpsRe) }

// each runs cmd on every server of s, and requires it to succeed.
func (r *opsRig) each(cmd ...any) {
	r.t.Helper()
	for i, d := range r.direct {
		require.NoError(r.t, d.Do(r.t.Context(), cmd...).Err(), "node %d: %v", i, cmd)
	}
}

// waitInfo waits until the INFO section of every server of s has line.
func (r *opsRig) waitInfo(section, line string) {
	r.t.Helper()
	for i, a := range r.s.Addrs {
		require.Eventually(r.t, func() bool {
			text, err := redisproc.Do(r.t.Context(), a, "INFO", section)
			return err == nil && strings.Contains(text, "\r\n"+line+"\r\n")
		}, 20*time.Second, 20*time.Millisecond, "node %d: INFO %s has no %q", i, section, line)
	}
}

// attachReplicas starts a new redis-server for each of the given nodes,
// makes it that node's replica (REPLICAOF), and waits until it is in sync
// and the node's replication ID has changed, as a master with no backlog
// does when its first replica attaches (replication.c: syncCommand). It
// returns the replicas.
func (r *opsRig) attachReplicas(nodes ...int) *redisproc.Servers {
	r.t.Helper()
	reps, err := redisproc.Start(r.t.Context(), len(nodes))
	require.NoError(r.t, err)
	r.t.Cleanup(reps.Stop)
	for j, i := range nodes {
		before := r.replid(i)
		host, port, _ := net.SplitHostPort(r.s.Addrs[i])
		_, err := redisproc.Do(r.t.Context(), reps.Addrs[j], "REPLICAOF", host, port)
		require.NoError(r.t, err)
		require.Eventually(r.t, func() bool {
			text, err := redisproc.Do(r.t.Context(), reps.Addrs[j], "INFO", "replication")
			return err == nil && strings.Contains(text, "master_link_status:up")
		}, 20*time.Second, 20*time.Millisecond, "the replica of node %d in sync", i)
		require.NotEqual(r.t, before, r.replid(i), "node %d's replication ID after its first replica attached", i)
	}
	return reps
}

// healthyOps are operations that lose no lock key. prepare, when set, runs
// before the deployment's first lock; do is the operation.
var healthyOps = []struct {
	name    string
	prepare func(r *opsRig) any
	do      func(r *opsRig, prepared any)
}{
	{name: "REPLICAOF: a first replica attaches to 3 of 5 masters", do: func(r *opsRig, _ any) {
		r.attachReplicas(0, 1, 2)
	}},
	{name: "replicas detached and the backlog freed after repl-backlog-ttl",
		prepare: func(r *opsRig) any { return r.attachReplicas(0, 1, 2) },
		do: func(r *opsRig, prepared any) {
			before := []string{r.replid(0), r.replid(1), r.replid(2)}
			prepared.(*redisproc.Servers).Stop()
			for i := range 3 {
				require.NoError(r.t, r.direct[i].ConfigSet(r.t.Context(), "repl-backlog-ttl", "1").Err())
			}
			// replication.c: replicationCron frees the backlog and draws a
			// new replication ID once no replica has been connected for
			// repl-backlog-ttl seconds.
			for i := range 3 {
				require.Eventually(r.t, func() bool { return r.replid(i) != before[i] }, 20*time.Second, 50*time.Millisecond,
					"node %d: the backlog freed and a new replication ID drawn", i)
			}
		}},
	{name: "CONFIG SET and CONFIG REWRITE", do: func(r *opsRig, _ any) {
		r.each("CONFIG", "SET", "hz", "20", "timeout", "300")
		r.each("CONFIG", "REWRITE")
	}},
	{name: "BGSAVE", do: func(r *opsRig, _ any) {
		r.each("BGSAVE")
		r.waitInfo("persistence", "rdb_bgsave_in_progress:0")
		r.waitInfo("persistence", "rdb_last_bgsave_status:ok")
	}},
	{name: "BGREWRITEAOF", do: func(r *opsRig, _ any) {
		r.each("BGREWRITEAOF")
		r.waitInfo("persistence", "aof_rewrite_in_progress:0")
		r.waitInfo("persistence", "aof_last_bgrewrite_status:ok")
	}},
	{name: "CLIENT KILL TYPE normal", do: func(r *opsRig, _ any) {
		r.each("CLIENT", "KILL", "TYPE", "normal")
	}},
	{name: "SCRIPT FLUSH", do: func(r *opsRig, _ any) {
		r.each("SCRIPT", "FLUSH")
	}},
	{name: "DEBUG RELOAD", do: func(r *opsRig, _ any) {
		r.each("DEBUG", "RELOAD")
	}},
}

// TestHealthyOperations: on a deployment that has taken fenced locks, an
// operation that loses no lock key (a first replica, a backlog freed, a
// configuration rewritten, a snapshot, an AOF rewrite, every connection
// killed, the script cache flushed, a DEBUG RELOAD) starts no node's
// restart guard. After it, a new Client (whose connections are checked
// anew) and the first one each obtain every lock in a single round, no
// node is met in its guard, and fences keep increasing.
func TestHealthyOperations(t *testing.T) {
	leakcheck.Check(t)
	for _, op := range healthyOps {
		t.Run(op.name, func(t *testing.T) {
			r := startOpsRig(t, false)
			var prepared any
			if op.prepare != nil {
				prepared = op.prepare(r)
			}
			first := r.client(false)
			fence := r.fencedLocks(first, 0, "the first Client, establishing")
			r.watch()
			fence = r.fencedLocks(first, fence, "the first Client, before")
			op.do(r, prepared)
			// NewNodes' clients notice a connection the server closed only
			// once it has been idle for 100 ms; sooner, its next command
			// fails once.
			time.Sleep(150 * time.Millisecond)
			fence = r.fencedLocks(r.client(false), fence, "a new Client, after")
			r.fencedLocks(first, fence, "the first Client, after")
			nodes, how := r.guardedNodes()
			assert.Empty(t, nodes, "nodes met in their restart guard: %v", how)
		})
	}
}

// lossEvents lose the lock key k on node lost, which holds it with nodes 0
// and 1. before runs once the deployment is established and before k is
// locked; it returns the loss.
var lossEvents = []struct {
	name   string
	group  bool // node 4 is a replicated group behind an address
	lost   int
	before func(r *opsRig) (lose func())
}{
	{name: "restart without data", lost: 2, before: func(r *opsRig) func() {
		return func() { require.NoError(r.t, r.s.Restart(r.t.Context(), 2)) }
	}},
	{name: "restart from an older snapshot", lost: 2, before: func(r *opsRig) func() {
		snap, err := r.s.Snapshot(2) // has the node's state, not k
		require.NoError(r.t, err)
		return func() { require.NoError(r.t, r.s.RestartFrom(r.t.Context(), 2, snap)) }
	}},
	{name: "FLUSHALL", lost: 2, before: func(r *opsRig) func() {
		return func() { require.NoError(r.t, r.direct[2].FlushAll(r.t.Context()).Err()) }
	}},
	{name: "failover to a lagging replica", group: true, lost: 4, before: func(r *opsRig) func() {
		waitReplicated(r.t, r.g, protocol.StateKey)
		r.g.HoldReplication() // the replica gets nothing from now on: not k
		return func() {
			require.Equal(r.t, "", get(r.t, r.g.Replica, "k"), "the replica lags")
			r.g.KillMaster()
			require.NoError(r.t, r.g.Promote())
			r.moved.SetTarget(r.g.Replica)
			r.moved.Cut()
		}
	}},
}

// TestLossEvents: a node that holds a lock on a bare quorum loses its key
// (a restart without data or from an older snapshot, FLUSHALL, a failover
// to a replica that lags). Its restart guard starts, and a second Client
// does not obtain the lock before the first one's Until. The negative
// controls run each event with the guard off: the second Client then
// obtains the lock while it is held, which shows that each event does lose
// the key.
func TestLossEvents(t *testing.T) {
	leakcheck.Check(t)
	for _, ev := range lossEvents {
		withControl(t, ev.name, func(t *testing.T, unsafely bool) {
			r := startOpsRig(t, ev.group)
			holder := r.holder(unsafely)
			r.establish(holder.Client)
			lose := ev.before(r)
			r.watch()

			l := holder.lockOn(t, "k", opsTTL, 0, 1, ev.lost)
			until := l.Until()
			lose()
			require.True(t, time.Now().Before(until), "the loss took the whole TTL")

			second := r.client(unsafely)
			tries, err := tryWhileHeld(t, second, l, unsafely)
			if unsafely {
				return
			}
			nodes, how := r.guardedNodes()
			assert.Equal(t, []int{ev.lost}, nodes, "the node that lost k, and only it, met in its guard: %v", how)
			t.Logf("%d tries until %v before the first Until; the last: %v", tries, time.Until(until).Round(time.Millisecond), err)
		})
	}
}

// withControl runs f as a parallel subtest called name with the restart
// guard on, and again as its negative control with the guard off
// (unsafely set).
func withControl(t *testing.T, name string, f func(t *testing.T, unsafely bool)) {
	for _, unsafely := range []bool{false, true} {
		n := name
		if unsafely {
			n += ", negative control without the guard"
		}
		t.Run(n, func(t *testing.T) {
			t.Parallel()
			f(t, unsafely)
		})
	}
}

// tryWhileHeld tries held's key through c (TryLock, every 50 ms) until
// one try obtains it or held's Until is one second away, so that a lock
// obtained is obtained while held is valid. Without the guard (unsafely:
// a negative control) it requires a try to obtain the key. With it, it
// requires every try to fail with ErrNotObtained, and returns the last
// error. It also returns the number of tries.
func tryWhileHeld(t *testing.T, c *redlock.Client, held *redlock.Lock, unsafely bool) (int, error) {
	t.Helper()
	until := held.Until()
	var err error
	tries := 0
	for time.Until(until) > time.Second {
		var l *redlock.Lock
		tries++
		if l, err = c.TryLock(t.Context(), held.Key(), opsTTL); err == nil {
			require.True(t, unsafely, "a second holder of %q %v before the first one's Until (fences: %d, then %d)",
				held.Key(), time.Until(until).Round(time.Millisecond), held.Fence(), l.Fence())
			return tries, nil
		}
		require.ErrorIs(t, err, redlock.ErrNotObtained)
		time.Sleep(50 * time.Millisecond)
	}
	require.NotZero(t, tries, "no time left to try")
	require.False(t, unsafely, "negative control: without the guard a second holder obtains %q while it is held; %d tries, the last: %v",
		held.Key(), tries, err)
	return tries, err
}

// keepers are what masters 3 and 4 go through, keeping the lock key k,
// while masters 0 to 2 restart without data; guarded are the nodes that
// must be met in their restart guard afterwards.
var keepers = []struct {
	name    string
	keep    func(r *opsRig)
	guarded []int
}{
	// Their replication IDs change (replication.c: syncCommand), and
	// nothing else.
	{"3 and 4 get their first replicas", func(r *opsRig) { r.attachReplicas(3, 4) }, []int{0, 1, 2}},
	// Other processes, which may lack locks in general but here have k:
	// their guards, begun by the connection check, are not a brand-new
	// deployment's.
	{"3 and 4 restart from their own data", func(r *opsRig) {
		for _, i := range []int{3, 4} {
			require.NoError(r.t, r.s.RestartWithData(r.t.Context(), i))
		}
	}, []int{0, 1, 2, 3, 4}},
}

// TestNoDoubleGrantAfterRestarts: Client X holds k on all five masters;
// masters 0 to 2 restart without data, and masters 3 and 4 keep k
// through an event that changes their replication IDs (keepers). A new
// Client Y, trying another key and then k, must not obtain k before X's
// Until: nodes 3 and 4 still hold it, so no round may take the five nodes
// for a brand-new deployment. The negative controls run each schedule
// with the guard off: Y then obtains k on nodes 0 to 2, which shows that
// the schedule gives k twice unless the guard holds.
func TestNoDoubleGrantAfterRestarts(t *testing.T) {
	leakcheck.Check(t)
	for _, sc := range keepers {
		withControl(t, sc.name, func(t *testing.T, unsafely bool) {
			r := startOpsRig(t, false)
			x := r.client(unsafely)
			r.establish(x)
			r.watch()

			lx, err := x.TryLock(t.Context(), "k", opsTTL)
			require.NoError(t, err)
			until := lx.Until()
			for i := range r.direct {
				require.Eventually(t, func() bool { return get(t, r.s.Addrs[i], "k") == lx.Token() }, 5*time.Second, 10*time.Millisecond,
					"node %d holds k", i)
			}
			for i := range 3 {
				require.NoError(t, r.s.Restart(t.Context(), i))
			}
			sc.keep(r)
			for _, i := range []int{3, 4} {
				require.Equal(t, lx.Token(), get(t, r.s.Addrs[i], "k"), "node %d keeps k", i)
			}
			require.True(t, time.Now().Before(until), "the schedule took the whole TTL")

			y := r.client(unsafely)
			other, err := y.TryLock(t.Context(), "other", opsTTL)
			t.Logf("Y's TryLock of other: obtained %v, %v", other != nil, err)
			r.countAnew() // Y's rounds on k from now on
			tries, err := tryWhileHeld(t, y, lx, unsafely)
			if unsafely {
				return
			}
			// A round ends once a quorum is out of reach, so any one
			// round may leave nodes 3 and 4 unheard: count the answers
			// of every round. A node that holds k answers taken, guarded
			// or not: it reads its guard only before a grant.
			for _, i := range []int{3, 4} {
				assert.NotZero(t, r.answered(i, redlock.VoteTaken), "node %d answered taken", i)
				assert.Zero(t, r.answered(i, redlock.VoteGranted), "node %d granted k to Y", i)
			}
			nodes, how := r.guardedNodes()
			assert.Equal(t, sc.guarded, nodes, "the nodes met in their guards: %v", how)
			t.Logf("%d tries; the last: %v", tries, err)
		})
	}
}
