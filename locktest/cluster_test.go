package locktest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
)

// client returns a go-redis client of addr with short timeouts and no
// retries, closed with t.
func client(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond, MaxRetries: -1, DisableIdentity: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestNodeFaults drives each fault of a native node and sees its effect
// through the node's address.
func TestNodeFaults(t *testing.T) {
	leakcheck.Check(t)
	c := Start(t, 2)
	n := c.Nodes[0]
	cl := client(t, n.Addr())
	ctx := t.Context()
	require.NoError(t, cl.Set(ctx, "k", "v", 0).Err())

	require.NoError(t, n.Restart(ctx, true))
	assert.Equal(t, "v", cl.Get(ctx, "k").Val(), "a restart with data keeps the key")

	require.NoError(t, n.Kill(ctx))
	assert.Error(t, cl.Ping(ctx).Err(), "a killed node does not answer")
	require.NoError(t, n.Start(ctx))
	assert.Equal(t, redis.Nil, cl.Get(ctx, "k").Err(), "a node started after a kill is empty")

	require.NoError(t, n.Pause())
	assert.Error(t, cl.Ping(ctx).Err(), "a paused node does not answer")
	require.NoError(t, n.Unpause())
	require.Eventually(t, func() bool { return cl.Ping(ctx).Err() == nil }, 5*time.Second, 10*time.Millisecond)

	n.Partition()
	assert.Error(t, cl.Ping(ctx).Err(), "a partitioned node does not answer")
	n.Heal()
	require.Eventually(t, func() bool { return cl.Ping(ctx).Err() == nil }, 5*time.Second, 10*time.Millisecond)

	n.SetLatency(300 * time.Millisecond)
	assert.Error(t, cl.Ping(ctx).Err(), "a round trip of 600ms exceeds the 200ms timeout")
	n.SetLatency(0)
	require.Eventually(t, func() bool { return cl.Ping(ctx).Err() == nil }, 5*time.Second, 10*time.Millisecond)

	assert.ErrorIs(t, n.Failover(ctx, time.Millisecond), ErrNoReplica)
	assert.Empty(t, n.ReplicaAddr())
	assert.NoError(t, client(t, c.Nodes[1].Addr()).Ping(ctx).Err(), "the other node was never touched")
}

// TestView: a client partition cuts one view off a node, not the others.
func TestView(t *testing.T) {
	c := Start(t, 1)
	addrs, links, err := c.View()
	require.NoError(t, err)
	ctx := t.Context()
	links[0].Partition()
	assert.Error(t, client(t, addrs[0]).Ping(ctx).Err(), "the view is cut off")
	assert.NoError(t, client(t, c.Addrs()[0]).Ping(ctx).Err(), "the node's own address is not")
	links[0].Heal()
}

// TestPausedClusterCleansUp: a node left paused is resumed and stopped by
// the cleanup (a stopped process would ignore SIGTERM and hang it).
func TestPausedClusterCleansUp(t *testing.T) {
	t.Run("paused", func(t *testing.T) {
		require.NoError(t, Start(t, 1).Nodes[0].Pause())
	})
}

// fakeNode is a Target that records the faults it receives.
type fakeNode struct {
	name  string
	kinds chan FaultKind
}

func (f *fakeNode) Name() string                                  { return f.name }
func (f *fakeNode) Kill(context.Context) error                    { f.kinds <- Kill; return nil }
func (f *fakeNode) Start(context.Context) error                   { return nil }
func (f *fakeNode) Pause() error                                  { f.kinds <- Pause; return nil }
func (f *fakeNode) Unpause() error                                { return nil }
func (f *fakeNode) Partition()                                    { f.kinds <- Partition }
func (f *fakeNode) Heal()                                         {}
func (f *fakeNode) SetLatency(d time.Duration)                    { f.kinds <- Latency }
func (f *fakeNode) Failover(context.Context, time.Duration) error { return errors.New("no replica") }

// TestScheduleSeed: two schedules with one seed start with the same fault
// on the same node, and the schedule keeps to a minority of the nodes.
func TestScheduleSeed(t *testing.T) {
	first := func(seed uint64) (int, FaultKind) {
		nodes := make([]Target, 5)
		kinds := make(chan FaultKind, 100)
		for i := range nodes {
			nodes[i] = &fakeNode{name: string(rune('a' + i)), kinds: kinds}
		}
		c := Schedule{Seed: seed, Gap: time.Millisecond, Kinds: []FaultKind{Kill, Pause, Partition, Latency}}.Run(t.Context(), nodes...)
		<-kinds
		time.Sleep(50 * time.Millisecond)
		faults := c.Stop()
		require.NotEmpty(t, faults)
		assert.Equal(t, seed, c.Seed())
		return faults[0].Node, faults[0].Kind
	}
	for seed := uint64(1); seed <= 5; seed++ {
		n1, k1 := first(seed)
		n2, k2 := first(seed)
		assert.Equal(t, n1, n2, "seed %d: node of the first fault", seed)
		assert.Equal(t, k1, k2, "seed %d: kind of the first fault", seed)
	}
}

// TestScheduleMisuse: a schedule that cannot run panics with what is wrong.
func TestScheduleMisuse(t *testing.T) {
	nodes := []Target{&fakeNode{name: "a"}}
	for _, tc := range []struct {
		s    Schedule
		want string
	}{
		{Schedule{Gap: -time.Second}, "locktest: Schedule.Gap -1s: must not be negative"},
		{Schedule{MaxLatency: -1}, "locktest: Schedule.MaxLatency -1ns: must not be negative"},
		{Schedule{MaxFaulty: -1}, "locktest: Schedule.MaxFaulty -1: must not be negative"},
		{Schedule{Nodes: []int{1}}, "locktest: Schedule.Nodes lists node 1 of 1"},
	} {
		assert.PanicsWithValue(t, tc.want, func() { tc.s.Run(t.Context(), nodes...).Stop() })
	}
}

// TestFailover: a failover loses the writes of its lag and keeps the older
// ones, and a second failover swaps master and replica back.
func TestFailover(t *testing.T) {
	leakcheck.Check(t)
	c := Start(t, 1, WithReplicas())
	n := c.Nodes[0]
	cl := client(t, n.Addr())
	ctx := t.Context()
	require.NoError(t, cl.Set(ctx, "old", "1", 0).Err())
	require.Eventually(t, func() bool {
		return client(t, n.ReplicaAddr()).Get(ctx, "old").Val() == "1"
	}, 5*time.Second, 10*time.Millisecond, "the replica catches up")
	first := n.ReplicaAddr()

	written := make(chan error, 1)
	go func() {
		time.Sleep(100 * time.Millisecond) // within the lag
		written <- client(t, n.Addr()).Set(ctx, "new", "1", 0).Err()
	}()
	require.NoError(t, n.Failover(ctx, 500*time.Millisecond))
	require.NoError(t, <-written, "the write of the lag reached the old master")
	assert.Equal(t, "1", cl.Get(ctx, "old").Val(), "the promoted replica has the older write")
	assert.Equal(t, redis.Nil, cl.Get(ctx, "new").Err(), "and lacks the write of the lag")
	assert.NotEqual(t, first, n.ReplicaAddr(), "the old master is the replica now")

	require.NoError(t, cl.Set(ctx, "after", "1", 0).Err())
	require.Eventually(t, func() bool {
		return client(t, n.ReplicaAddr()).Get(ctx, "after").Val() == "1"
	}, 5*time.Second, 10*time.Millisecond, "the new replica catches up")
	require.NoError(t, n.Failover(ctx, 0))
	assert.Equal(t, first, n.ReplicaAddr(), "a second failover swaps them back")
	assert.Equal(t, "1", cl.Get(ctx, "after").Val(), "a replicated write survives a failover")
	require.NoError(t, n.Kill(ctx))
	require.NoError(t, n.Start(ctx))
	assert.Equal(t, redis.Nil, cl.Get(ctx, "after").Err(), "a kill acts on the current master")
}

// failedT is a test that has failed, whose logs and errors are kept.
type failedT struct {
	testing.TB
	mu   sync.Mutex
	logs []string
}

func (f *failedT) Failed() bool { return true }
func (f *failedT) Logf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}
func (f *failedT) Errorf(format string, args ...any) { f.Logf(format, args...) }

// TestStartLogsTheSeed: a failed test's cleanup logs the schedule's seed
// and the faults that could not be injected.
func TestStartLogsTheSeed(t *testing.T) {
	ft := &failedT{}
	t.Run("failing", func(t *testing.T) {
		ft.TB = t
		nodes := []Target{&fakeNode{name: "a", kinds: make(chan FaultKind, 100)}, &fakeNode{name: "b", kinds: make(chan FaultKind, 100)}}
		Schedule{Seed: 42, Kinds: []FaultKind{Failover}, MaxFaulty: 1, Gap: time.Millisecond}.Start(ft, nodes...)
		time.Sleep(20 * time.Millisecond)
	})
	logs := strings.Join(ft.logs, "\n")
	assert.Contains(t, logs, "locktest: fault schedule seed 42 (Schedule.Seed reproduces it)")
	assert.Contains(t, logs, "locktest: failover of a: no replica")
}
