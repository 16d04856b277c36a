package redlock_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redquorum/redquorum/internal/testkit/redisproc"
	"github.com/redquorum/redquorum/redlock"
)

// benchNodes returns the nodes of a benchmark: REDQUORUM_BENCH_NODES
// (host:port,...) when set, else five redis-server processes. Without
// redis-server on PATH the benchmark is skipped (failed under CI=true).
func benchNodes(b *testing.B) []string {
	if s := os.Getenv("REDQUORUM_BENCH_NODES"); s != "" {
		return strings.Split(s, ",")
	}
	return redisproc.StartT(b, 5).Addrs
}

// BenchmarkLockUnlockNative measures one Lock+Unlock by one caller; run it with
// -benchmem for the allocations per lock+unlock.
func BenchmarkLockUnlockNative(b *testing.B) {
	lockUnlock(b, benchClient(b, nil))
}

// BenchmarkLockUnlockNativeObserved is BenchmarkLockUnlockNative with an
// Observer whose hooks do nothing: the cost of building the events.
func BenchmarkLockUnlockNativeObserved(b *testing.B) {
	lockUnlock(b, benchClient(b, &redlock.Observer{
		Begin: func(ctx context.Context, _ redlock.Op, _ []string) context.Context { return ctx },
		End:   func(context.Context, redlock.Event) {},
		Do:    func(context.Context, redlock.DoEvent) {},
		Node:  func(context.Context, redlock.NodeEvent) {},
	}))
}

// lockUnlock runs one Lock+Unlock per iteration on c.
func lockUnlock(b *testing.B, c *redlock.Client) {
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		l, err := c.Lock(ctx, "bench", 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLockUnlockNativeParallel measures lock+unlock on distinct keys by
// concurrent callers of one Client (GOMAXPROCS × -cpu callers).
func BenchmarkLockUnlockNativeParallel(b *testing.B) {
	c := benchClient(b, nil)
	ctx := b.Context()
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		key := "bench:" + strconv.FormatInt(next.Add(1), 10)
		for pb.Next() {
			l, err := c.Lock(ctx, key, 10*time.Second)
			if err != nil {
				b.Error(err)
				return
			}
			if err := l.Unlock(ctx); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// benchClient returns a Client on the benchmark's nodes with obs (may be
// nil), closed with them at the end.
func benchClient(b *testing.B, obs *redlock.Observer) *redlock.Client {
	nodes := redlock.NewNodes(benchNodes(b)...)
	c, err := redlock.New(nodes, &redlock.Options{NodeTimeout: time.Second, Observer: obs}) // a loaded machine stalls for tens of ms
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = c.Close()
		for _, n := range nodes {
			_ = n.Close()
		}
	})
	return c
}
