package redlockotel_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	redlockotel "github.com/redquorum/redquorum/contrib/otel"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
	"github.com/redquorum/redquorum/redlock"
)

// setup returns a Client on n redis-server processes, traced into spans
// and measured by reader.
func setup(t *testing.T, n int, opts *redlockotel.Options) (*redlock.Client, *tracetest.SpanRecorder, *sdkmetric.ManualReader) {
	t.Helper()
	redisproc.Require(t)
	srv, err := redisproc.Start(t.Context(), n)
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	establish(t, srv.Addrs)
	spans := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	if opts == nil {
		opts = &redlockotel.Options{}
	}
	opts.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	opts.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := redlockotel.New(opts)
	require.NoError(t, err)
	client, err := redlock.Open(srv.Addrs, &redlock.Options{Observer: obs})
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	return client, spans, reader
}

// establish takes a first lock on a brand-new deployment, which ends the
// nodes' restart guards, so that the traced rounds find them in service.
func establish(t *testing.T, addrs []string) {
	t.Helper()
	c, err := redlock.Open(addrs, nil)
	require.NoError(t, err)
	l, err := c.Lock(t.Context(), "establish", time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(t.Context()))
	require.NoError(t, c.Close())
}

func attrs(kvs []attribute.KeyValue) map[string]attribute.Value {
	m := map[string]attribute.Value{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

func named(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func TestSpans(t *testing.T) {
	client, rec, _ := setup(t, 3, nil)
	ctx := t.Context()
	l, err := client.Lock(ctx, "job", time.Second)
	require.NoError(t, err)
	_, err = client.TryLock(ctx, "job", time.Second)
	require.ErrorIs(t, err, redlock.ErrTaken)
	require.NoError(t, l.Extend(ctx, time.Second))
	require.NoError(t, l.Unlock(ctx))

	spans := rec.Ended()
	require.Len(t, spans, 4)
	lock := named(spans, "redlock.Lock")[0]
	a := attrs(lock.Attributes())
	assert.Equal(t, "job", a["redlock.key"].AsString())
	assert.Equal(t, "obtained", a["redlock.outcome"].AsString())
	assert.Equal(t, int64(1), a["redlock.rounds"].AsInt64())
	assert.GreaterOrEqual(t, a["redlock.votes"].AsInt64(), int64(2))
	assert.Equal(t, codes.Unset, lock.Status().Code)
	require.Len(t, lock.Events(), 1)
	round := lock.Events()[0]
	assert.Equal(t, "round", round.Name)
	ra := attrs(round.Attributes)
	assert.Len(t, ra["redlock.nodes"].AsStringSlice(), 3)
	assert.Contains(t, ra["redlock.node.outcomes"].AsStringSlice(), "granted")
	assert.False(t, round.Time.Before(lock.StartTime()), "the round is within its span")
	assert.False(t, round.Time.After(lock.EndTime()))

	taken := named(spans, "redlock.TryLock")[0]
	assert.Equal(t, "taken", attrs(taken.Attributes())["redlock.outcome"].AsString())
	assert.Equal(t, codes.Error, taken.Status().Code)
	require.NotEmpty(t, taken.Events())
	assert.Equal(t, "exception", taken.Events()[len(taken.Events())-1].Name, "the error is recorded")

	assert.Equal(t, "extended", attrs(named(spans, "redlock.Extend")[0].Attributes())["redlock.outcome"].AsString())
	unlock := attrs(named(spans, "redlock.Unlock")[0].Attributes())
	assert.Equal(t, "released", unlock["redlock.outcome"].AsString())
	assert.Positive(t, unlock["redlock.held"].AsFloat64())
}

func TestDoSpanIsTheParent(t *testing.T) {
	client, rec, reader := setup(t, 3, nil)
	err := client.Do(t.Context(), "report", 300*time.Millisecond, func(ctx context.Context) error {
		time.Sleep(250 * time.Millisecond) // two extensions
		return errors.New("report failed")
	})
	require.EqualError(t, err, "report failed")

	spans := rec.Ended()
	do := named(spans, "redlock.Do")
	require.Len(t, do, 1)
	for _, s := range spans {
		if s != do[0] {
			assert.Equal(t, do[0].SpanContext().SpanID(), s.Parent().SpanID(), "%s is a child of Do", s.Name())
		}
	}
	var ops []string
	for _, s := range spans {
		ops = append(ops, s.Name())
	}
	assert.Contains(t, ops, "redlock.Extend")
	assert.Equal(t, "redlock.Do", ops[len(ops)-1])
	var extensions int
	for _, ev := range do[0].Events() {
		if ev.Name == "extension" {
			extensions++
		}
	}
	assert.Equal(t, len(named(spans, "redlock.Extend")), extensions)
	assert.Equal(t, "released", attrs(do[0].Attributes())["redlock.outcome"].AsString())
	assert.Equal(t, codes.Error, do[0].Status().Code, "fn's error is recorded")

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(t.Context(), &rm))
	ext := metricByName(t, rm, "redquorum.do.extensions").Data.(metricdata.Sum[int64])
	assert.Equal(t, int64(extensions), ext.DataPoints[0].Value)
}

func metricByName(t *testing.T, rm metricdata.ResourceMetrics, name string) metricdata.Metrics {
	t.Helper()
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m
			}
		}
	}
	require.FailNow(t, "metric not collected", name)
	return metricdata.Metrics{}
}

func TestMetrics(t *testing.T) {
	client, _, reader := setup(t, 3, &redlockotel.Options{KeyLabel: func(string) string { return "jobs" }})
	ctx := t.Context()
	const n = 10
	for range n {
		l, err := client.Lock(ctx, "job", time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	kept, err := client.TryLock(ctx, "kept", time.Second)
	require.NoError(t, err)
	defer kept.Unlock(ctx)

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	ops := metricByName(t, rm, "redquorum.operations").Data.(metricdata.Sum[int64])
	counts := map[string]int64{}
	for _, dp := range ops.DataPoints {
		op, _ := dp.Attributes.Value("op")
		outcome, _ := dp.Attributes.Value("outcome")
		key, _ := dp.Attributes.Value("key")
		assert.Equal(t, "jobs", key.AsString())
		counts[op.AsString()+"/"+outcome.AsString()] = dp.Value
	}
	assert.Equal(t, map[string]int64{"lock/obtained": n, "unlock/released": n, "trylock/obtained": 1}, counts)

	wait := metricByName(t, rm, "redquorum.lock.wait")
	assert.Equal(t, "s", wait.Unit)
	var waits uint64
	for _, dp := range wait.Data.(metricdata.Histogram[float64]).DataPoints {
		waits += dp.Count
	}
	assert.Equal(t, uint64(n+1), waits)
	hold := metricByName(t, rm, "redquorum.lock.hold").Data.(metricdata.Histogram[float64])
	assert.Equal(t, uint64(n), hold.DataPoints[0].Count)

	lat := metricByName(t, rm, "redquorum.node.latency").Data.(metricdata.Histogram[float64])
	var nodes []string
	for _, dp := range lat.DataPoints {
		node, _ := dp.Attributes.Value("node")
		if !slices.Contains(nodes, node.AsString()) {
			nodes = append(nodes, node.AsString())
		}
		assert.Positive(t, dp.Sum)
	}
	// A round times the nodes that answered before it was decided: a
	// quorum at least; on a loaded machine the third may answer last in
	// every round.
	assert.GreaterOrEqual(t, len(nodes), 2, "nodes timed: %v", nodes)
	for _, n := range nodes {
		assert.Regexp(t, `^127\.0\.0\.1:\d+$`, n, "a node is named by its address")
	}

	held := metricByName(t, rm, "redquorum.locks.held").Data.(metricdata.Sum[int64])
	assert.Equal(t, int64(1), held.DataPoints[0].Value, "kept")
}

func TestNodeUnreachable(t *testing.T) {
	redisproc.Require(t)
	srv, err := redisproc.Start(t.Context(), 3)
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	establish(t, srv.Addrs)
	dead, err := redisproc.Start(t.Context(), 1)
	require.NoError(t, err)
	dead.Stop() // nothing listens at its address now

	spans := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	obs, err := redlockotel.New(&redlockotel.Options{
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
	})
	require.NoError(t, err)
	nodes := redlock.NewNodes(append(slices.Clone(srv.Addrs), dead.Addrs[0])...)
	client, err := redlock.New(nodes, &redlock.Options{Observer: obs, NodeTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = client.Close()
		for _, n := range nodes {
			_ = n.Close()
		}
	})
	// A round decides without its slowest node: lock until one heard from
	// the dead node.
	for range 50 {
		l, err := client.TryLock(t.Context(), "job", time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(t.Context()))
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(t.Context(), &rm))
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != "redquorum.node.unreachable" {
					continue
				}
				dp := m.Data.(metricdata.Sum[int64]).DataPoints
				require.Len(t, dp, 1)
				node, _ := dp[0].Attributes.Value("node")
				assert.Equal(t, dead.Addrs[0], node.AsString())
				assert.Equal(t, int64(1), dp[0].Value)
				var found bool
				for _, s := range spans.Ended() {
					for _, ev := range s.Events() {
						a := attrs(ev.Attributes)
						found = found || ev.Name == "node state" && a["redlock.change"].AsString() == "unreachable" && a["redlock.node"].AsString() == dead.Addrs[0]
					}
				}
				assert.True(t, found, "a span has the node's change as an event")
				return
			}
		}
	}
	t.Fatal("the dead node was never reported unreachable")
}
