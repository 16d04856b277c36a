package protocol

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// BenchmarkTombstones measures what the node spends on the scripts
// (INFO commandstats, server-µs/call) on the usual paths and on the rare
// paths of tombstones (tombstone.lua), on one real server.
func BenchmarkTombstones(b *testing.B) {
	ctx := b.Context()
	node := oneNode(b, true)
	p := New(time.Minute, false, Handoff, "")
	run := func(cmd Cmd) {
		_, err := p.Run(ctx, node, cmd)
		require.NoError(b, err)
	}
	acquire := func(tok string) Cmd {
		return p.AcquireCmd(Acquire{Keys: []string{"k", StateKey}, Token: tok, TTL: 30 * time.Second})
	}
	release := func(tok string) Cmd { return p.Release(Release{Keys: []string{"k"}, Token: tok, TTL: time.Minute}) }
	run(acquire("load")) // loads the scripts
	run(release("load"))
	run(p.Extend([]string{"k", StateKey}, "load", time.Minute))
	for _, bc := range []struct {
		name  string
		setup func()
		op    func(i int)
	}{
		{"lock unlock", func() {}, func(i int) {
			tok := "tok" + strconv.Itoa(i)
			run(acquire(tok))
			run(release(tok))
		}},
		{"extend", func() { node.Set(ctx, "k", "tok", time.Hour) }, func(int) {
			run(p.Extend([]string{"k", StateKey}, "tok", time.Hour))
		}},
		{"lock unlock over a tombstone", func() { node.Set(ctx, "k", TombstonePrefix+"a", time.Hour) }, func(i int) {
			tok := "tok" + strconv.Itoa(i)
			run(acquire(tok))
			run(release(tok))
		}},
		{"release adding a tombstone", func() {}, func(i int) {
			if i%MaxTombstones == 0 {
				node.Del(ctx, "k")
			}
			run(release("gone" + strconv.Itoa(i)))
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			node.Del(ctx, "k")
			bc.setup()
			node.ConfigResetStat(ctx)
			i := 0
			for b.Loop() {
				bc.op(i)
				i++
			}
			b.ReportMetric(serverMicros(b, node), "server-µs/call")
		})
	}
}

// serverMicros returns the node's mean time per EVALSHA call since its
// statistics were reset.
func serverMicros(b *testing.B, node *redis.Client) float64 {
	info, err := node.Info(b.Context(), "commandstats").Result()
	require.NoError(b, err)
	for l := range strings.SplitSeq(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "cmdstat_evalsha:"); ok {
			for f := range strings.SplitSeq(rest, ",") {
				if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
					us, err := strconv.ParseFloat(v, 64)
					require.NoError(b, err)
					return us
				}
			}
		}
	}
	b.Fatal("no cmdstat_evalsha in INFO commandstats")
	return 0
}
