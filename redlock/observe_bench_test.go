package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/redquorum/redquorum/quorum"
)

// BenchmarkObserverEvents measures, without the network, the client-side
// work that an Observer with no-op hooks adds to one lock+unlock on five
// nodes: two records, their rounds' votes and node states, and two End
// calls. Compare it with BenchmarkLockUnlockNative's time per lock+unlock.
func BenchmarkObserverEvents(b *testing.B) {
	nodes := NewNodes("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3", "127.0.0.1:4", "127.0.0.1:5") // never dialled
	cl, err := New(nodes, &Options{Observer: &Observer{
		Begin: func(ctx context.Context, _ Op, _ []string) context.Context { return ctx },
		End:   func(context.Context, Event) {},
		Node:  func(context.Context, NodeEvent) {},
	}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cl.Close()
		for _, n := range nodes {
			_ = n.Close()
		}
	})
	ctx := b.Context()
	answered := quorum.Start(ctx, 5, time.Second, func(context.Context, int) error { return nil })
	answered.Wait()
	keys := []string{"bench"}
	b.ReportAllocs()
	for b.Loop() {
		for _, op := range []Op{OpLock, OpUnlock} {
			_, rec := cl.begin(ctx, op, keys)
			lat := rec.latencies()
			kind := plainRound
			if op == OpLock {
				kind = acquireRound
			}
			rec.add(rec.now(), answered, lat, kind, nil, false)
			rec.end(nil, Obtained)
		}
	}
}
