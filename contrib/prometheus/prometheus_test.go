package redlockprom_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	redlockprom "github.com/redquorum/redquorum/contrib/prometheus"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
	"github.com/redquorum/redquorum/redlock"
)

// servers starts n redis-server processes and establishes them as a lock
// deployment, so that a Client that sees them beside a dead node locks at
// once.
func servers(t *testing.T, n int) []string {
	t.Helper()
	redisproc.Require(t)
	srv, err := redisproc.Start(t.Context(), n)
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	c, err := redlock.Open(srv.Addrs, nil)
	require.NoError(t, err)
	l, err := c.Lock(t.Context(), "establish", time.Second) // a new deployment ends its guards
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	require.NoError(t, c.Close())
	return srv.Addrs
}

// deadAddr returns an address where nothing listens.
func deadAddr(t *testing.T) string {
	srv, err := redisproc.Start(t.Context(), 1)
	require.NoError(t, err)
	srv.Stop()
	return srv.Addrs[0]
}

// family returns the gathered family name, failing if it is missing.
func family(t *testing.T, fams []*dto.MetricFamily, name string) *dto.MetricFamily {
	t.Helper()
	for _, f := range fams {
		if f.GetName() == name {
			return f
		}
	}
	require.FailNow(t, "metric not gathered", name)
	return nil
}

// sample returns the metric of f whose labels include want.
func sample(t *testing.T, f *dto.MetricFamily, want map[string]string) *dto.Metric {
	t.Helper()
	if m := find(f, want); m != nil {
		return m
	}
	require.FailNow(t, "no such sample", "%s%v", f.GetName(), want)
	return nil
}

// find returns the metric of f whose labels include want, or nil.
func find(f *dto.MetricFamily, want map[string]string) *dto.Metric {
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		match := true
		for k, v := range want {
			match = match && have[k] == v
		}
		if match {
			return m
		}
	}
	return nil
}

func TestMetricsAfterLockTraffic(t *testing.T) {
	addrs := servers(t, 4)
	dead := deadAddr(t)
	metrics := redlockprom.New(nil)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(metrics))
	nodes := append(redlock.NewNodes(addrs...), redlock.NewNodes(dead)...)
	client, err := redlock.New(nodes, &redlock.Options{Observer: metrics.Observer(), NodeTimeout: time.Second})
	require.NoError(t, err)
	other, err := redlock.New(nodes, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = client.Close()
		_ = other.Close()
		for _, n := range nodes {
			_ = n.Close()
		}
	})
	ctx := t.Context()

	const n = 20
	for range n {
		l, err := client.Lock(ctx, "job", 5*time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Extend(ctx, 5*time.Second))
		require.NoError(t, l.Unlock(ctx))
	}
	kept, err := client.TryLock(ctx, "kept", 5*time.Second)
	require.NoError(t, err)
	taken, err := other.TryLock(ctx, "taken", 5*time.Second)
	require.NoError(t, err)
	_, err = client.TryLock(ctx, "taken", 5*time.Second)
	require.ErrorIs(t, err, redlock.ErrTaken)
	require.NoError(t, taken.Unlock(ctx))
	// Node 0 loses its data: its restart guard begins.
	require.NoError(t, redis.NewClient(&redis.Options{Addr: addrs[0]}).FlushAll(ctx).Err())
	for i := 0; ; i++ {
		l, err := client.TryLock(ctx, "after-flush", 5*time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
		if gauge(t, reg, "redquorum_node_guarded", map[string]string{"node": addrs[0]}) == 1 || i == 100 {
			break
		}
	}

	fams, err := reg.Gather()
	require.NoError(t, err)
	ops := family(t, fams, "redquorum_operations_total")
	assert.Equal(t, float64(n), sample(t, ops, map[string]string{"op": "lock", "outcome": "obtained"}).GetCounter().GetValue())
	assert.Equal(t, float64(n), sample(t, ops, map[string]string{"op": "extend", "outcome": "extended"}).GetCounter().GetValue())
	assert.GreaterOrEqual(t, sample(t, ops, map[string]string{"op": "unlock", "outcome": "released"}).GetCounter().GetValue(), float64(n+1))
	assert.Equal(t, 1.0, sample(t, ops, map[string]string{"op": "trylock", "outcome": "taken"}).GetCounter().GetValue())

	wait := sample(t, family(t, fams, "redquorum_lock_wait_seconds"), map[string]string{"op": "lock", "outcome": "obtained"}).GetHistogram()
	assert.Equal(t, uint64(n), wait.GetSampleCount())
	assert.Positive(t, wait.GetSampleSum())
	hold := family(t, fams, "redquorum_lock_hold_seconds").GetMetric()[0].GetHistogram()
	assert.GreaterOrEqual(t, hold.GetSampleCount(), uint64(n+1))

	// A round times the nodes that answered before it was decided: a
	// quorum (3 of the 5) at least, each by its address. On a loaded
	// machine a live node may answer last in every round of a kind.
	lat := family(t, fams, "redquorum_node_latency_seconds")
	for _, req := range []string{"acquire", "extend", "release"} {
		timed := 0
		for _, a := range addrs {
			if m := find(lat, map[string]string{"node": a, "request": req}); m != nil {
				assert.Positive(t, m.GetHistogram().GetSampleCount(), "%s %s", a, req)
				timed++
			}
		}
		assert.GreaterOrEqual(t, timed, 3, "%s: nodes timed", req)
	}
	for _, m := range lat.GetMetric() {
		for _, l := range m.GetLabel() {
			assert.False(t, l.GetName() == "node" && l.GetValue() == dead, "a dead node never answers")
		}
	}

	assert.Equal(t, 1.0, family(t, fams, "redquorum_locks_held").GetMetric()[0].GetGauge().GetValue(), "kept is still held")
	assert.Equal(t, 1.0, sample(t, family(t, fams, "redquorum_node_unreachable"), map[string]string{"node": dead}).GetGauge().GetValue())
	assert.Equal(t, 1.0, sample(t, family(t, fams, "redquorum_node_guarded"), map[string]string{"node": addrs[0]}).GetGauge().GetValue())
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				assert.NotEqual(t, "key", l.GetName(), "no key label by default")
			}
		}
	}
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems, "Prometheus naming conventions")

	require.NoError(t, kept.Unlock(ctx))
	assert.Zero(t, gauge(t, reg, "redquorum_locks_held", nil))
}

// gauge gathers reg and returns the value of the gauge name with labels,
// or -1 when there is no such sample yet.
func gauge(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range fams {
		if f.GetName() == name {
			return sample(t, f, labels).GetGauge().GetValue()
		}
	}
	return -1
}

func TestKeyLabelAndDo(t *testing.T) {
	addrs := servers(t, 3)
	metrics := redlockprom.New(&redlockprom.Options{
		KeyLabel:    func(key string) string { kind, _, _ := strings.Cut(key, ":"); return kind },
		ConstLabels: prometheus.Labels{"client": "test"},
	})
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(metrics))
	client, err := redlock.Open(addrs, &redlock.Options{Observer: metrics.Observer()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })

	for _, key := range []string{"report:1", "report:2", "stock:7"} {
		require.NoError(t, client.Do(t.Context(), key, 300*time.Millisecond, func(ctx context.Context) error {
			time.Sleep(250 * time.Millisecond) // two extensions
			return nil
		}))
	}
	err = client.Do(t.Context(), "report:3", time.Second, func(ctx context.Context) error { return errors.New("failed") })
	require.Error(t, err)

	fams, err := reg.Gather()
	require.NoError(t, err)
	ops := family(t, fams, "redquorum_operations_total")
	assert.Equal(t, 3.0, sample(t, ops, map[string]string{"op": "do", "outcome": "released", "key": "report", "client": "test"}).GetCounter().GetValue())
	assert.Equal(t, 1.0, sample(t, ops, map[string]string{"op": "do", "outcome": "released", "key": "stock"}).GetCounter().GetValue())
	hold := family(t, fams, "redquorum_lock_hold_seconds")
	assert.Equal(t, uint64(3), sample(t, hold, map[string]string{"key": "report"}).GetHistogram().GetSampleCount())
	assert.Len(t, hold.GetMetric(), 2, "one series per key label value")
	ext := family(t, fams, "redquorum_do_extensions_total").GetMetric()[0].GetCounter().GetValue()
	assert.Equal(t, sample(t, ops, map[string]string{"op": "extend", "outcome": "extended", "key": "report"}).GetCounter().GetValue()+
		sample(t, ops, map[string]string{"op": "extend", "outcome": "extended", "key": "stock"}).GetCounter().GetValue(), ext)
	assert.Positive(t, ext)
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems)
}
