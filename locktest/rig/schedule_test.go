package rig_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/locktest"
	"github.com/redquorum/redquorum/locktest/rig"
	"github.com/redquorum/redquorum/redlock"
)

// TestLocktestOnRig runs locktest's fault schedule on Docker nodes with
// replicas, every kind of fault but the client partition included, while
// a Client locks and records its holds: the schedule's faults take effect
// without error, and no two holds of a key overlap.
func TestLocktestOnRig(t *testing.T) {
	leakcheck.Check(t)
	c := rig.Start(t, 3, rig.WithReplicas())
	targets := make([]locktest.Target, len(c.Nodes))
	for i, n := range c.Nodes {
		targets[i] = n
	}
	const ttl = 500 * time.Millisecond
	client, err := redlock.New(redlock.NewNodes(c.Addrs()...), &redlock.Options{NodeTimeout: 200 * time.Millisecond, RestartGuard: 2 * ttl})
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })

	kinds := []locktest.FaultKind{locktest.Kill, locktest.Pause, locktest.Partition, locktest.Latency, locktest.Failover}
	chaos := locktest.Schedule{Kinds: kinds, Gap: 100 * time.Millisecond, KillDowntime: ttl + 100*time.Millisecond,
		MaxLatency: 150 * time.Millisecond}.Start(t, targets...)
	var rec locktest.Recorder
	for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline); {
		span := rec.Start(0, "k")
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		l, err := client.Lock(ctx, "k", ttl)
		cancel()
		if err != nil {
			span.Failed()
			continue
		}
		span.Obtained(0)
		time.Sleep(time.Millisecond)
		span.End(l.Until())
		_ = l.Unlock(t.Context())
	}
	faults := chaos.Stop()
	require.NotEmpty(t, faults, "seed %d", chaos.Seed())
	for _, f := range faults {
		assert.Empty(t, f.Err, "%s of %s", f.Kind, f.Name)
		assert.NotZero(t, f.End, "%s of %s ended", f.Kind, f.Name)
	}
	r := locktest.Verify(t, rec.History(), faults)
	assert.Positive(t, len(r.History)-len(r.Overlaps))
}
