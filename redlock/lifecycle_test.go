package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/hashslot"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
)

// lockOn obtains key for ttl on exactly the given nodes: the others fail
// every command during the round.
func lockOn(t *testing.T, c *cluster, cl *Client, key string, ttl time.Duration, nodes ...int) *Lock {
	t.Helper()
	on := map[int]bool{}
	for _, i := range nodes {
		on[i] = true
	}
	for i, h := range c.hooks {
		if !on[i] {
			h.set(nil, errBroken)
		}
	}
	l, err := cl.TryLock(t.Context(), key, ttl)
	require.NoError(t, err)
	settle(cl) // the round returned at its quorum
	for _, h := range c.hooks {
		h.set(nil, nil)
	}
	for i := range c.srv {
		require.Equal(t, on[i], held(c.srv[i], key), "node %d", i)
	}
	return l
}

// nodeErrs returns the per-node errors of a failed operation.
func nodeErrs(t *testing.T, err error) []error {
	t.Helper()
	var e *Error
	require.ErrorAs(t, err, &e)
	errs := make([]error, len(e.Nodes))
	for i, n := range e.Nodes {
		errs[i] = n.Err
	}
	return errs
}

// isScript selects the EVALSHA commands of script s.
func isScript(s testScript) func(redis.Cmder) bool {
	return func(cmd redis.Cmder) bool {
		a := cmd.Args()
		return len(a) > 1 && s.Is(a[1])
	}
}

// TestRestartGuard is the node-crash scenario: A holds a lock on exactly
// three of five nodes, one of them restarts without its data, and B tries.
// Without the guard B wins a quorum while A's lock is valid (the violation
// the guard exists for); with it, the restarted node refuses until the
// guard has passed on its own clock. The node's clock cannot be moved: the
// test moves the guard's end to a second away instead, and waits for it.
func TestRestartGuard(t *testing.T) {
	const ttl = 10 * time.Second
	for _, guard := range []bool{true, false} {
		t.Run("guard="+strconv.FormatBool(guard), func(t *testing.T) {
			leakcheck.Check(t)
			c := newCluster(t, 5)
			c.fresh = true // a deployment that came up a moment ago
			opts := &Options{UnsafeNoRestartGuard: !guard}
			a, b := c.client(t, opts), c.client(t, opts)
			warm, err := a.TryLock(t.Context(), "warm-up", ttl)
			require.NoError(t, err, "a new deployment locks at once")
			require.NoError(t, warm.Unlock(t.Context()))
			settle(a) // the establishing acquires and the releases have landed

			la := lockOn(t, c, a, "k", ttl, 0, 1, 2)
			c.restart(2)
			before := c.srv[2].Time()
			lb, err := b.TryLock(t.Context(), "k", ttl)
			if !guard {
				require.NoError(t, err, "without the guard B obtains the lock")
				assert.True(t, time.Now().Before(la.Until()) && time.Now().Before(lb.Until()),
					"two holders at once: the violation the guard prevents")
				return
			}
			require.ErrorIs(t, err, ErrNotObtained)
			assert.ErrorIs(t, err, ErrGuarded)
			errs := nodeErrs(t, err)
			assert.ErrorIs(t, errs[2], ErrGuarded, "the restarted node")
			assert.ErrorIs(t, errs[0], ErrTaken)
			// Let B's requests still in flight land before the guard moves.
			require.NoError(t, b.Close())
			after := c.srv[2].Time()
			g := c.srv[2].HGet(reservedKey, "g")
			assertMillis(t, g, before.Add(DefaultRestartGuard), after.Add(DefaultRestartGuard), "guarded until node time + guard")
			b = c.client(t, opts)

			// Shortly before the guard ends, the node still refuses.
			end := c.srv[2].Time().Add(time.Second)
			c.srv[2].HSet(reservedKey, "g", strconv.FormatInt(end.UnixMilli(), 10))
			_, err = b.TryLock(t.Context(), "other", ttl)
			require.NoError(t, err, "four nodes grant")
			settle(b) // node 2's answer has come
			require.True(t, c.srv[2].Time().Before(end), "the round outlasted the guard's last second")
			assert.False(t, held(c.srv[2], "other"), "the guarded node granted")

			// Once the guard has passed, A's keys have expired (their TTL is
			// shorter than the guard) and the node grants again.
			require.Eventually(t, func() bool { return !c.srv[2].Time().Before(end) }, 5*time.Second, 10*time.Millisecond)
			for i := range 2 {
				c.srv[i].Del("k")
			}
			lb, err = b.TryLock(t.Context(), "k", ttl)
			require.NoError(t, err)
			settle(b) // Close would release lb
			assert.Equal(t, 5, c.holders("k", lb.Token()))
			g = c.srv[2].HGet(reservedKey, "g")
			assert.Equal(t, "0", g)
		})
	}
}

// TestNewDeployment: a round that finds every node guarded establishes them
// all and locks at once, and the nodes start with known fence counters,
// from their time in microseconds (read before and after the round).
func TestNewDeployment(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 5)
	c.fresh = true
	before := make([]time.Time, len(c.srv))
	for i, m := range c.srv {
		before[i] = m.Time()
	}
	cl := c.client(t, &Options{Fencing: true})
	l, err := cl.TryLock(t.Context(), "k", time.Second)
	require.NoError(t, err)
	began := slices.MinFunc(before, time.Time.Compare)
	assert.Greater(t, l.Fence(), uint64(began.UnixMicro()), "above the time the counters began")
	require.NoError(t, cl.Close())
	written := 0
	for i, m := range c.srv {
		assert.Equal(t, "0", m.HGet(reservedKey, "g"), "node %d established", i)
		f := m.HGet(reservedKey, "f")
		if f == fmt.Sprint(l.Fence()) {
			written++
		} else {
			n, err := strconv.ParseInt(f, 10, 64)
			require.NoError(t, err, "node %d", i)
			assert.True(t, n >= before[i].UnixMicro() && n <= m.Time().UnixMicro(), "node %d: counter %d is not its time in µs during the round (from %d)", i, n, before[i].UnixMicro())
		}
	}
	// The write-back goes to the nodes that had granted when the first
	// phase was decided.
	assert.GreaterOrEqual(t, written, 3)
}

// TestNewDeploymentNodeDown: with one node down at the first start the
// client cannot tell a new deployment from lost data. If the node comes up
// within newDeploymentWindow, a round finds all five newly guarded and
// locks; if later, the nodes serve once their own guards have run out.
// Time passes for the guards only (see passGuards).
func TestNewDeploymentNodeDown(t *testing.T) {
	window := defaultTunables().newDeploymentWindow
	for _, late := range []time.Duration{window - time.Second, window + time.Second} {
		t.Run(late.String(), func(t *testing.T) { testNewDeploymentNodeDown(t, late) })
	}
}

func testNewDeploymentNodeDown(t *testing.T, late time.Duration) {
	leakcheck.Check(t)
	c := newCluster(t, 5)
	c.fresh = true
	cl := c.client(t, nil)
	c.hooks[4].set(nil, errBroken)
	_, err := cl.TryLock(t.Context(), "k", time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	errs := nodeErrs(t, err)
	assert.ErrorIs(t, errs[4], errBroken)
	guarded := 0
	for i := range 4 {
		if errors.Is(errs[i], ErrGuarded) {
			guarded++
		} else {
			assert.ErrorIs(t, errs[i], errPending, "node %d", i)
		}
	}
	assert.GreaterOrEqual(t, guarded, 2, "the round failed once three nodes had refused")
	for i := range 4 {
		assert.Eventually(t, func() bool { g := c.srv[i].HGet(reservedKey, "g"); return g != "" && g != "0" }, 5*time.Second, time.Millisecond, "node %d guarded", i)
	}

	c.hooks[4].set(nil, nil)
	c.passGuards(late) // node 4 has no state yet: its guard begins now
	_, err = cl.TryLock(t.Context(), "k", time.Second)
	if late < defaultTunables().newDeploymentWindow {
		require.NoError(t, err)
		return
	}
	require.ErrorIs(t, err, ErrGuarded)
	c.passGuards(DefaultRestartGuard - late)
	_, err = cl.TryLock(t.Context(), "k", time.Second)
	require.NoError(t, err, "nodes 0-3 are out of their guard")
}

// TestRollingRestart: the nodes restart one after another, without data,
// ten seconds apart, while locks are taken; C takes a lock on the three
// nodes that have not restarted yet, and then those restart too. When the
// last one restarts every node is guarded, but not a new deployment: B,
// even from a new Client, must not get C's lock. The negative control sets
// new-deployment window to an hour, and B gets it. Time passes for the
// guards only (see passGuards): the restarts wipe every key that matters.
func TestRollingRestart(t *testing.T) {
	t.Run("window 5s", func(t *testing.T) { testRollingRestart(t, false) })
	t.Run("window 1h", func(t *testing.T) { testRollingRestart(t, true) })
}

func testRollingRestart(t *testing.T, violate bool) {
	leakcheck.Check(t)
	c := newCluster(t, 5)
	if violate {
		c.tune = func(t *tunables) { t.newDeploymentWindow = time.Hour }
	}
	var now time.Duration // the time the test has let pass
	passTo := func(at time.Duration) {
		c.passGuards(at - now)
		now = at
	}
	traffic := c.client(t, nil)
	tick := func(at time.Duration, restart int) {
		passTo(at)
		c.restart(restart)
		_, _ = traffic.TryLock(t.Context(), "traffic", time.Second) // lock requests keep coming
		settle(traffic)                                             // before the next restart
	}
	tick(0, 0)
	tick(10*time.Second, 1)
	passTo(15 * time.Second)
	holder := c.client(t, nil)
	lc := lockOn(t, c, holder, "k", 30*time.Second, 2, 3, 4)
	tick(20*time.Second, 2)
	tick(30*time.Second, 3)
	passTo(40 * time.Second)
	c.restart(4)

	c.fresh = true        // the test's clients no longer set up the nodes' state
	b := c.client(t, nil) // a new Client that has never seen the nodes in service
	lb, err := b.TryLock(t.Context(), "k", 30*time.Second)
	assert.True(t, time.Now().Before(lc.Until()), "C's lock is still valid")
	if violate {
		require.NoError(t, err, "negative control: B gets the lock C holds")
		assert.True(t, time.Now().Before(lb.Until()))
		return
	}
	require.ErrorIs(t, err, ErrGuarded)
	for i, e := range nodeErrs(t, err) {
		if e != errPending {
			assert.ErrorIs(t, e, ErrGuarded, "node %d", i)
		}
	}
}

// TestExtendStartsGuard: an Extend that finds a node without its state
// begins that node's guard, as an acquire would, so that a holder that only
// extends marks the moment a node lost its data.
func TestExtendStartsGuard(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 5)
	cl := c.client(t, nil)
	l, err := cl.TryLock(t.Context(), "k", 10*time.Second)
	require.NoError(t, err)
	c.waitHolders(t, "k", l.Token(), 5) // the round returned at its quorum
	c.restart(0)
	before := c.srv[0].Time()
	require.NoError(t, l.Extend(t.Context(), 10*time.Second))
	require.NoError(t, cl.Close()) // node 0's answer has come
	assertMillis(t, c.srv[0].HGet(reservedKey, "g"), before.Add(DefaultRestartGuard), c.srv[0].Time().Add(DefaultRestartGuard), "guarded until node time + guard")
	assert.False(t, held(c.srv[0], "k"), "a failed extend sets nothing")
	assert.Equal(t, "0", c.srv[1].HGet(reservedKey, "g"), "a node in service is left alone")

	unsafe := c.client(t, &Options{UnsafeNoRestartGuard: true})
	l, err = unsafe.TryLock(t.Context(), "j", 10*time.Second)
	require.NoError(t, err)
	c.waitHolders(t, "j", l.Token(), 5)
	c.restart(1)
	require.NoError(t, l.Extend(t.Context(), 10*time.Second))
	require.NoError(t, unsafe.Close())
	assert.False(t, c.srv[1].Exists(reservedKey), "without the guard Extend leaves the state alone")
}

// TestNewDeploymentOnlyForNewClients: when every node loses its data at
// once, a Client that has seen the nodes in service keeps waiting for the
// guard; only a new Client takes them for a new deployment (the limit the
// guard documents).
func TestNewDeploymentOnlyForNewClients(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 5)
	old := c.client(t, nil)
	_, err := old.TryLock(t.Context(), "a", time.Second)
	require.NoError(t, err)
	for i := range c.srv {
		c.restart(i)
	}
	_, err = old.TryLock(t.Context(), "b", time.Second)
	require.ErrorIs(t, err, ErrGuarded)
	require.NoError(t, old.Close()) // its requests have landed
	c.fresh = true                  // the test's clients no longer set up the nodes' state
	_, err = c.client(t, nil).TryLock(t.Context(), "b", time.Second)
	require.NoError(t, err)
}

// TestRestartDuringBootstrap: a node that loses its data between the round
// that saw every node new and the round that ends their guard stays
// guarded; the others lock.
func TestRestartDuringBootstrap(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 5)
	c.fresh = true
	cl := c.client(t, nil)
	c.hooks[2].selectCmds(func(cmd redis.Cmder) bool {
		// evalsha sha 2 key state token ttl guard, the handoff strategy's
		// five, the shortcut: "e..." is the round that ends the guards.
		a := cmd.Args()
		if len(a) < 14 || !scripts.Acquire.Is(a[1]) {
			return false
		}
		est, _ := a[13].(string)
		return strings.HasPrefix(est, "e")
	})
	c.hooks[2].set(func() { c.srv[2].FlushAll() }, nil)
	l, err := cl.TryLock(t.Context(), "k", time.Second)
	require.NoError(t, err)
	settle(cl) // Close would release l
	assert.False(t, held(c.srv[2], "k"), "the restarted node granted")
	assert.Equal(t, 4, c.holders("k", l.Token()))
	g := c.srv[2].HGet(reservedKey, "g")
	assert.NotEqual(t, "0", g, "the restarted node left its guard")
	assert.NotEmpty(t, g)
}

// TestConcurrentBootstrap: clients that start together on a new deployment
// all get their locks without waiting for the guard.
func TestConcurrentBootstrap(t *testing.T) {
	leakcheck.Check(t)
	for range 5 {
		c := newCluster(t, 5)
		c.fresh = true
		const clients = 4
		errs := make([]error, clients)
		var wg sync.WaitGroup
		for i := range clients {
			cl := c.client(t, nil)
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				_, errs[i] = cl.Lock(ctx, "k"+strconv.Itoa(i), time.Second)
			})
		}
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "client %d", i)
		}
	}
}

// TestGuardScript checks the acquire script's guard on one node: creation,
// the time left, the shortcut's mark and establish, a stale establish
// after another loss, and the end. The node's clock runs: time passes for
// the guard by moving its end (see passGuards), and each time left is
// checked against the node's time before and after the call.
func TestGuardScript(t *testing.T) {
	c := newCluster(t, 1)
	m, n, ctx := c.srv[0], c.nodes[0], t.Context()
	run := func(token, establish, fence string) any {
		t.Helper()
		v, err := kernelAcquire(fence == "1").Run(ctx, n, []string{"k", reservedKey}, token, 1000, 60_000, establish).Result()
		require.NoError(t, err)
		return v
	}
	// refused runs the script on a guarded state and checks its reply
	// {-2, ms left, id, mark}, ms left being the guard's end less the
	// node's time during the call.
	refused := func(token, establish, fence, id, mark, msg string) {
		t.Helper()
		end, err := strconv.ParseInt(m.HGet(reservedKey, "g"), 10, 64)
		require.NoError(t, err, msg)
		before := m.Time().UnixMilli()
		v := run(token, establish, fence)
		after := m.Time().UnixMilli()
		r, ok := v.([]any)
		require.True(t, ok && len(r) == 4, "%s: %v", msg, v)
		assert.Equal(t, []any{int64(-2), id, mark}, []any{r[0], r[2], r[3]}, msg)
		left, _ := r[1].(int64)
		assert.True(t, end-after <= left && left <= end-before, "%s: %d ms left of a guard that ends at %d, node time %d to %d", msg, left, end, before, after)
	}
	h := strings.Repeat("a", 32) // a mark, as protocol.StateMark makes them
	assert.Equal(t, []any{int64(-2), int64(60_000), "t1", ""}, run("t1", "", "0"), "no state: guarded for the full guard")
	c.passGuards(20 * time.Second)
	refused("t2", "", "0", "t1", "", "20 s later")
	refused("t2", "e"+h+"wrong", "0", "t1", "", "establish needs the state's id")
	refused("t2", "e"+h+"t1", "0", "t1", "", "establish needs the mark")
	refused("t2", "m"+h+"wrong", "0", "t1", "", "a mark needs the state's id")
	refused("t2", "m"+h+"t1", "0", "t1", h, "marked, nothing granted")
	assert.False(t, held(m, "k"))
	b := strings.Repeat("b", 32)
	refused("t2", "m"+b+"t1", "0", "t1", h, "a mark is set once")
	refused("t2", "e"+b+"t1", "0", "t1", h, "establish needs the same mark")

	// The node loses its data after a client marked it as t1: the
	// client's establish must not end the new guard.
	m.FlushAll()
	assert.Equal(t, []any{int64(-2), int64(60_000), "t3", ""}, run("t3", "e"+h+"t1", "0"))
	assert.False(t, held(m, "k"))
	refused("t4", "e"+h+"t3", "0", "t3", "", "not marked")
	refused("t4", "m"+h+"t3", "0", "t3", h, "marked")
	before := m.Time().UnixMicro()
	v := run("t4", "e"+h+"t3", "1")
	after := m.Time().UnixMicro()
	r, ok := v.([]any)
	require.True(t, ok && len(r) == 2, "%v", v)
	assert.Equal(t, int64(0), r[0], "established: granted")
	f, _ := r[1].(int64)
	assert.True(t, before <= f && f <= after, "counter known, from the node's time in microseconds: %d, node time %d to %d", f, before, after)
	m.Del("k")

	// A guard that the connection check began (mark "x": the server kept
	// data) is neither marked nor ended by the shortcut.
	m.HSet(reservedKey, "g", fmt.Sprint(m.Time().Add(40*time.Second).UnixMilli()), "id", "run", "v", "x")
	m.HDel(reservedKey, "f")
	refused("t8", "m"+h+"run", "0", "run", "x", "not marked")
	refused("t8", "e"+h+"run", "0", "run", "x", "not established")
	refused("t8", "e"+"x"+"run", "0", "run", "x", "not established by its own mark either")
	assert.False(t, held(m, "k"))
	// An earlier version's check left no mark, and the server's
	// replication ID as the state's id: the same.
	m.HSet(reservedKey, "id", "replid", "r", "replid")
	m.HDel(reservedKey, "v")
	refused("t8", "m"+h+"replid", "0", "replid", "x", "not marked")
	assert.False(t, m.Exists(reservedKey) && m.HGet(reservedKey, "v") != "")

	// A guard that runs out leaves the counter unknown: in its last
	// seconds it refuses, and once they have passed it grants.
	m.FlushAll()
	run("t5", "", "0")
	c.passGuards(DefaultRestartGuard - 5*time.Second)
	refused("t6", "", "1", "t5", "", "the guard's last seconds")
	c.passGuards(5 * time.Second)
	assert.Equal(t, []any{int64(0), int64(-1)}, run("t6", "", "1"))
	assert.InDelta(t, 1000, m.TTL("k").Milliseconds(), 100)

	// With the guard off, the script ignores the state.
	m.FlushAll()
	v, err := kernelAcquire(true).Run(ctx, n, []string{"k", reservedKey}, "t7", 1000, 0).Result()
	require.NoError(t, err)
	assert.Equal(t, []any{int64(0), int64(0)}, v)
	assert.False(t, m.Exists(reservedKey))
}

func TestGuardOptions(t *testing.T) {
	c := newCluster(t, 3)
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{RestartGuard: -time.Second}, "Options.RestartGuard -1s is negative"},
		{Options{RestartGuard: 1500 * time.Microsecond}, "Options.RestartGuard 1.5ms is not a whole number of milliseconds"},
		{Options{RestartGuard: time.Second, UnsafeNoRestartGuard: true}, "Options.RestartGuard 1s is set together with UnsafeNoRestartGuard"},
	} {
		_, err := New(c.nodes, &tc.opts)
		assert.EqualError(t, err, "redlock: "+tc.want)
	}

	cl := c.client(t, &Options{RestartGuard: 2 * time.Second})
	_, err := cl.TryLock(t.Context(), "k", 3*time.Second)
	assert.ErrorContains(t, err, "ttl 3s exceeds Options.RestartGuard 2s")
	_, err = cl.LockMany(t.Context(), []string{"k", "j"}, 3*time.Second)
	assert.ErrorContains(t, err, "ttl 3s exceeds Options.RestartGuard 2s")
	l, err := cl.TryLock(t.Context(), "k", 2*time.Second)
	require.NoError(t, err)
	assert.ErrorContains(t, l.Extend(t.Context(), 3*time.Second), "ttl 3s exceeds Options.RestartGuard 2s")

	unsafe := c.client(t, &Options{UnsafeNoRestartGuard: true})
	_, err = unsafe.TryLock(t.Context(), "long", time.Hour)
	assert.NoError(t, err, "no bound on the ttl without the guard")
}

// TestFenceIncreases: successive holders of a key, from different clients,
// get strictly increasing fences; without Options.Fencing, Fence is 0.
func TestFenceIncreases(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 5)
	clients := []*Client{c.client(t, &Options{Fencing: true}), c.client(t, &Options{Fencing: true})}
	var last uint64
	for i := range 6 {
		l, err := clients[i%2].Lock(t.Context(), "k", time.Second)
		require.NoError(t, err)
		assert.Greater(t, l.Fence(), last)
		last = l.Fence()
		require.NoError(t, l.Unlock(t.Context()))
	}
	plain := c.client(t, nil)
	l, err := plain.TryLock(t.Context(), "k", time.Second)
	require.NoError(t, err)
	assert.Zero(t, l.Fence())
}

// setFences sets each node's fence counter; "" removes it (unknown).
func (c *cluster) setFences(f ...string) {
	for i, v := range f {
		if v == "" {
			c.srv[i].HDel(reservedKey, "f")
			continue
		}
		c.srv[i].HSet(reservedKey, "f", v)
	}
}

// TestFenceTwoQuorums: a holder whose quorum shares only one node with the
// previous holder's write-back still gets a higher fence.
func TestFenceTwoQuorums(t *testing.T) {
	c := newCluster(t, 5)
	cl := c.client(t, &Options{Fencing: true})
	c.setFences("5", "5", "5", "0", "0") // the last holder's write-back reached 0, 1, 2
	c.hooks[0].set(nil, errBroken)
	c.hooks[1].set(nil, errBroken)
	l, err := cl.TryLock(t.Context(), "k", time.Second)
	require.NoError(t, err)
	assert.Equal(t, uint64(6), l.Fence())
	require.NoError(t, cl.Close())
	for i := 2; i < 5; i++ {
		f := c.srv[i].HGet(reservedKey, "f")
		assert.Equal(t, "6", f, "node %d", i)
	}
}

// TestFenceLostCounter: a node that lost its counter does not count toward
// the fence's quorum until a write-back repairs it. The negative control
// (the guard off, so a lost counter reads as 0) shows the fence going
// backwards.
func TestFenceLostCounter(t *testing.T) {
	c := newCluster(t, 5)
	safe := c.client(t, &Options{Fencing: true})
	c.setFences("9", "9", "9", "0", "0")
	c.setFences("", "", "", "", "") // keep the last node's counters below
	c.setFences("9", "9", "", "0", "0")
	c.hooks[0].set(nil, errBroken)
	c.hooks[1].set(nil, errBroken)
	_, err := safe.TryLock(t.Context(), "k", time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.ErrorIs(t, nodeErrs(t, err)[2], ErrFenceUnknown)

	unsafe := c.client(t, &Options{Fencing: true, UnsafeNoRestartGuard: true})
	c.srv[2].HDel(reservedKey, "f")
	l, err := unsafe.TryLock(t.Context(), "k2", time.Second)
	require.NoError(t, err)
	assert.Less(t, l.Fence(), uint64(9), "negative control: without the guard a lost counter reads 0 and the fence goes backwards")
	require.NoError(t, l.Unlock(t.Context()))
	require.NoError(t, unsafe.Close())

	// With node 0 back, a quorum of known counters exists again. The
	// write-back also repairs node 2 if it had granted by then.
	c.setFences("9", "9", "", "0", "0")
	c.hooks[0].set(nil, nil)
	l, err = safe.TryLock(t.Context(), "j", time.Second)
	require.NoError(t, err)
	assert.Equal(t, uint64(10), l.Fence())
	require.NoError(t, safe.Close())
	assert.Contains(t, []string{"", "10"}, c.srv[2].HGet(reservedKey, "f"))
}

// TestFenceScript: the write-back raises a counter, never lowers it, makes an
// unknown one known, and needs the token on every key.
func TestFenceScript(t *testing.T) {
	c := newCluster(t, 1)
	m, n, ctx := c.srv[0], c.nodes[0], t.Context()
	keys := []string{"a", "b", reservedKey}
	fence := func(token string, f int64) int64 {
		t.Helper()
		v, err := scripts.Fence.Run(ctx, n, keys, token, f).Int64()
		require.NoError(t, err)
		return v
	}
	require.NoError(t, m.Set("a", "tok"))
	assert.Equal(t, int64(0), fence("tok", 5), "b does not hold the token")
	assert.False(t, m.Exists(reservedKey))
	require.NoError(t, m.Set("b", "tok"))
	assert.Equal(t, int64(1), fence("tok", 5), "unknown counter set")
	assert.Equal(t, "5", m.HGet(reservedKey, "f"))
	assert.Equal(t, int64(1), fence("tok", 3))
	assert.Equal(t, "5", m.HGet(reservedKey, "f"), "never lowered")
	assert.Equal(t, int64(1), fence("tok", 7))
	assert.Equal(t, "7", m.HGet(reservedKey, "f"))
	assert.Equal(t, int64(0), fence("other", 9))
	assert.Equal(t, "7", m.HGet(reservedKey, "f"))
}

// TestFenceWriteBackFails: without a quorum of write-backs the lock is not
// obtained and nothing is left on the nodes.
func TestFenceWriteBackFails(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 5)
	cl := c.client(t, &Options{Fencing: true})
	for _, i := range []int{2, 3, 4} {
		c.hooks[i].selectCmds(isScript(scripts.Fence))
		c.hooks[i].set(nil, errBroken)
	}
	_, err := cl.TryLock(t.Context(), "k", time.Second)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.ErrorIs(t, err, errBroken)
	require.NoError(t, cl.Close())
	assert.Equal(t, 0, c.keys("k"))
}

// TestFenceValidity: the validity counts both phases; a write-back that
// ends after it does not give the lock.
func TestFenceValidity(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	fake := clock.NewFake(time.Unix(1_800_000_000, 0))
	cl := c.client(t, &Options{Fencing: true, Clock: fake})
	for _, h := range c.hooks {
		h.selectCmds(isScript(scripts.Fence))
		h.set(func() { fake.Advance(50 * time.Millisecond) }, nil)
	}
	// ttl 100ms leaves 97ms; each write-back moves the clock 50ms, and the
	// round waits for two.
	_, err := cl.TryLock(t.Context(), "k", 100*time.Millisecond)
	require.ErrorIs(t, err, ErrNotObtained)
	assert.ErrorContains(t, err, "the round took too long")
	require.NoError(t, cl.Close())
	assert.Equal(t, 0, c.keys("k"))
}

func TestLockMany(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 5)
	a, b := c.client(t, nil), c.client(t, nil)
	keys := []string{"a", "b", "c"}
	l, err := a.LockMany(t.Context(), keys, 10*time.Second)
	require.NoError(t, err)
	keys[0] = "changed"
	assert.Equal(t, []string{"a", "b", "c"}, l.Keys(), "the lock keeps its own copy")
	assert.Equal(t, "a", l.Key())
	for _, k := range l.Keys() {
		c.waitHolders(t, k, l.Token(), 5)
	}

	_, err = b.TryLock(t.Context(), "b", time.Second)
	assert.ErrorIs(t, err, ErrTaken)
	_, err = b.TryLockMany(t.Context(), []string{"c", "d"}, time.Second)
	require.ErrorIs(t, err, ErrTaken)
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, "c, d", e.Key)
	require.NoError(t, b.Close())
	assert.Equal(t, 0, c.keys("d"), "a node took part of a lock")

	c.srv[0].SetTTL("a", time.Second)
	require.NoError(t, l.Extend(t.Context(), 20*time.Second))
	for _, k := range l.Keys() {
		// Extend returns at its quorum; node 0 may answer a moment later.
		assert.Eventually(t, func() bool { return c.srv[0].TTL(k) > 15*time.Second }, 5*time.Second, time.Millisecond, k)
	}
	require.NoError(t, l.Unlock(t.Context()))
	require.NoError(t, a.Close())
	for _, k := range l.Keys() {
		assert.Equal(t, 0, c.keys(k), k)
	}
}

// TestLockManyAllOrNone: a node where one key is taken grants none of them;
// the quorum is counted over nodes.
func TestLockManyAllOrNone(t *testing.T) {
	c := newCluster(t, 5)
	for _, i := range []int{0, 1} {
		require.NoError(t, c.srv[i].Set("b", "other"))
		c.srv[i].SetTTL("b", time.Minute)
	}
	cl := c.client(t, nil)
	l, err := cl.TryLockMany(t.Context(), []string{"a", "b", "c"}, 10*time.Second)
	require.NoError(t, err)
	settle(cl) // Close would release l
	for i := range 5 {
		for _, k := range []string{"a", "c"} {
			assert.Equal(t, i >= 2, held(c.srv[i], k), "node %d key %s", i, k)
		}
	}
	assert.Equal(t, 3, c.holders("b", l.Token()))

	// Extend needs every key on a node: a node that lost one does not count.
	cl = c.client(t, nil)
	l, err = cl.TryLockMany(t.Context(), []string{"x", "y"}, 10*time.Second)
	require.NoError(t, err)
	c.waitHolders(t, "y", l.Token(), 5)
	for i := range 3 {
		c.srv[i].Del("y")
	}
	err = l.Extend(t.Context(), 10*time.Second)
	require.ErrorIs(t, err, ErrNotHeld)
	assert.Equal(t, 5, c.holders("x", l.Token()), "a failed extend deletes nothing")
}

func TestLockManyBadInput(t *testing.T) {
	c := newCluster(t, 3)
	cl := c.client(t, nil)
	for _, tc := range []struct {
		keys []string
		want string
	}{
		{nil, "redlock: no keys"},
		{[]string{}, "redlock: no keys"},
		{[]string{""}, "redlock: empty key"},
		{[]string{"a", ""}, "redlock: keys[1] is empty"},
		{[]string{"a", "b", "a"}, `redlock: keys[2] "a" is the same as keys[0]`},
		{[]string{"redquorum:node"}, `redlock: key "redquorum:node" starts with "redquorum:node", which is reserved for the nodes' state`},
		{[]string{"redquorum:queue:k"}, `redlock: key "redquorum:queue:k" starts with "redquorum:queue:", which is reserved for the lines of waiters`},
	} {
		_, err := cl.TryLockMany(t.Context(), tc.keys, time.Second)
		assert.EqualError(t, err, tc.want)
		_, err = cl.LockMany(t.Context(), tc.keys, time.Second)
		assert.EqualError(t, err, tc.want)
	}
	require.NoError(t, cl.Close())
	for i, m := range c.srv {
		assert.Equal(t, []string{reservedKey}, m.Keys(), "node %d", i)
	}
}

// TestClusterNodeKeys: on Redis Cluster nodes a lock's keys must share a hash
// tag, and the node's state key lives in the lock's slot.
func TestClusterNodeKeys(t *testing.T) {
	var nodes []redis.UniversalClient
	for i := range 3 {
		n := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:" + strconv.Itoa(1+i)}, MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = n.Close() })
		nodes = append(nodes, n)
	}
	cl, err := New(nodes, &Options{KeyPrefix: "lock:"})
	require.NoError(t, err)
	_, err = cl.TryLockMany(t.Context(), []string{"{order:1}:a", "{order:2}:b"}, time.Second)
	assert.EqualError(t, err, `redlock: keys[1] "{order:2}:b" and keys[0] "{order:1}:a" have different hash tags: a node is a Redis Cluster or Ring, so every key of one lock needs the same hash tag, as in {order:42}:a and {order:42}:b`)

	// Fencing needs a quorum of plain masters (test/cluster_test.go shows
	// why), unless the restart guard is off and unknown counters read as 0.
	_, err = New(nodes, &Options{Fencing: true})
	assert.EqualError(t, err, "redlock: Options.Fencing needs at least 2 plain masters among the 3 nodes, and 3 are a Redis Cluster or Ring: there the fence counters are kept per hash slot or shard, one that the deployment has not used yet has an unknown counter, and fenced locks on its keys would fail with ErrFenceUnknown")
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:4"}})
	p5, p6 := redis.NewClient(NodeOptions("127.0.0.1:5")), redis.NewClient(NodeOptions("127.0.0.1:6"))
	t.Cleanup(func() { _, _, _ = ring.Close(), p5.Close(), p6.Close() })
	_, err = New([]redis.UniversalClient{nodes[0], ring, p5}, &Options{Fencing: true})
	assert.ErrorContains(t, err, "needs at least 2 plain masters among the 3 nodes, and 2 are a Redis Cluster or Ring")
	for _, o := range []*Options{{Fencing: true, UnsafeNoRestartGuard: true}, {}} {
		ok, err := New(nodes, o)
		require.NoError(t, err)
		require.NoError(t, ok.Close())
	}
	var mixedLogs, clusterLogs logBuffer
	mixed, err := New([]redis.UniversalClient{nodes[0], p5, p6}, &Options{Fencing: true, Logger: mixedLogs.logger()})
	require.NoError(t, err, "two plain masters of three: a quorum of known counters")
	require.NoError(t, mixed.Close())
	// A quorum of Cluster nodes is warned about the per-slot guard.
	all, err := New(nodes, &Options{Logger: clusterLogs.logger()})
	require.NoError(t, err)
	require.NoError(t, all.Close())
	assert.Contains(t, clusterLogs.String(), "a quorum of the nodes are Redis Clusters, whose restart guard is per hash slot")
	assert.NotContains(t, mixedLogs.String(), "Redis Clusters", "two plain masters of three make a quorum")

	for _, key := range []string{"plain", "{order:1}:a"} {
		k := cl.nodes[0].ScriptKeys([]string{"lock:" + key, "lock:" + reservedKey})
		require.Len(t, k, 2)
		assert.Equal(t, hashslot.Slot("lock:"+key), hashslot.Slot(k[1]), "state key %s for %s", k[1], key)
	}
}
