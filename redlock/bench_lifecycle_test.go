package redlock

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// BenchmarkLockUnlock measures TryLock followed by Unlock on five nodes:
// redis-server processes, or the Redis servers listed in
// REDQUORUM_BENCH_ADDRS (comma-separated host:port), for the default path,
// fencing and a three-key lock. It reports the node commands per
// lock+unlock.
func BenchmarkLockUnlock(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts Options
		keys []string
	}{
		{"default", Options{}, []string{"k"}},
		{"fencing", Options{Fencing: true}, []string{"k"}},
		{"many3", Options{}, []string{"a", "b", "c"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			nodes, calls := benchNodes(b)
			opts := bc.opts
			opts.NodeTimeout = time.Second // a loaded machine must not fail the benchmark
			opts.NodeClientsAsGiven = true // through the hooks that count the commands
			cl, err := New(nodes, &opts)
			require.NoError(b, err)
			defer cl.Close()
			ctx := b.Context()
			b.ReportAllocs()
			start := calls()
			keys := make([]string, len(bc.keys))
			i := 0
			for b.Loop() {
				// A fresh key each time: the previous Unlock returns at its
				// quorum, and its last releases may still be on the way.
				i++
				for j, k := range bc.keys {
					keys[j] = k + strconv.Itoa(i)
				}
				l, err := cl.TryLockMany(ctx, keys, 10*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
			_ = cl.Close()
			b.ReportMetric(float64(calls()-start)/float64(b.N)/float64(len(nodes)), "cmds/node/op")
		})
	}
}

func benchNodes(b *testing.B) ([]redis.UniversalClient, func() int64) {
	var addrs []string
	if env := os.Getenv("REDQUORUM_BENCH_ADDRS"); env != "" {
		addrs = strings.Split(env, ",")
	} else {
		addrs = redisproc.StartT(b, 5).Addrs
	}
	var hooks []*faultHook
	var nodes []redis.UniversalClient
	for _, a := range addrs {
		n := redis.NewClient(NodeOptions(a))
		h := &faultHook{}
		n.AddHook(h)
		b.Cleanup(func() { _ = n.Close() })
		nodes = append(nodes, n)
		hooks = append(hooks, h)
	}
	return nodes, func() int64 {
		var s int64
		for _, h := range hooks {
			s += h.calls.Load()
		}
		return s
	}
}
