package loadtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/redlock"
)

// Redquorum returns the Impl of this library, with opts (nil for defaults)
// on node clients built by [redlock.NewNodes].
func Redquorum(opts *redlock.Options) Impl {
	return redquorumOn("redquorum", opts, redlock.NewNodes)
}

// RedquorumUser returns the Impl "redquorum-user": this library with opts
// on the node clients of [UserClients].
func RedquorumUser(opts *redlock.Options) Impl {
	return redquorumOn("redquorum-user", opts, UserClients)
}

// redquorumOn returns the Impl name: this library with opts on the node
// clients that nodes builds, closed after the Client.
func redquorumOn(name string, opts *redlock.Options, nodes func(addrs ...string) []redis.UniversalClient) Impl {
	return Impl{Name: name, New: func(addrs []string) (Locker, func(), error) {
		nodes := nodes(addrs...)
		closeNodes := func() {
			for _, n := range nodes {
				_ = n.Close()
			}
		}
		c, err := redlock.New(nodes, opts)
		if err != nil {
			closeNodes()
			return nil, nil, err
		}
		return redquorumLocker{c}, func() { _ = c.Close(); closeNodes() }, nil
	}}
}

type redquorumLocker struct{ c *redlock.Client }

func (r redquorumLocker) Lock(ctx context.Context, key string, ttl time.Duration) (Unlocker, error) {
	l, err := r.c.Lock(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// UserClients returns go-redis clients for addrs, as a user who moves from
// another Redlock library builds them for this one. They have go-redis's
// defaults: RESP3, a pool of 10 per GOMAXPROCS, five dials per connection.
// They add the two settings that New warns about, MaxRetries -1 and
// ContextTimeoutEnabled.
func UserClients(addrs ...string) []redis.UniversalClient {
	cs := make([]redis.UniversalClient, len(addrs))
	for i, a := range addrs {
		cs[i] = redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, ContextTimeoutEnabled: true})
	}
	return cs
}

// NodeClients returns plain go-redis clients for addrs, as most users of
// other libraries build them.
func NodeClients(addrs []string) []*redis.Client {
	cs := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		cs[i] = redis.NewClient(&redis.Options{Addr: a})
	}
	return cs
}

// Ms formats a duration in milliseconds with three significant digits, or
// in seconds from one second on.
func Ms(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d >= time.Second:
		return fmt.Sprintf("%.3gs", d.Seconds())
	}
	return fmt.Sprintf("%.3gms", float64(d)/float64(time.Millisecond))
}

// WriteTable prints one row per result. When the nodes' CPU time was
// measured, a line under the table explains it and marks coarse figures.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "impl\tscenario\tops/s\tp50\tp90\tp99\tp99.9\tallocs/op\tnode µs/op\tclient µs/op\terrors\tnote")
	measured, coarse := false, false
	for _, r := range results {
		measured = measured || r.NodeCPU != nil
		coarse = coarse || (r.NodeCPU != nil && r.NodeCPU.Coarse())
		allocs := "-"
		if r.AllocsPerOp > 0 {
			allocs = fmt.Sprintf("%.0f", r.AllocsPerOp)
		}
		note := ""
		if len(r.Shares) > 0 {
			note = fmt.Sprintf("shares %v, min/max %.2f, gap p50 %s mean %s, hold mean %s, wait max %s, overlaps %d", r.Shares, r.ShareRatio(), Ms(r.Gap.P50), Ms(r.Gap.Mean), Ms(r.Hold.Mean), Ms(r.Latency.Max), r.Overlaps)
		}
		if r.FirstError != "" {
			note = strings.TrimSpace(note + " first error: " + shorten(r.FirstError, 80))
		}
		fmt.Fprintf(tw, "%s\t%s\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.Impl, r.Title, r.PerSec,
			Ms(r.Latency.P50), Ms(r.Latency.P90), Ms(r.Latency.P99), Ms(r.Latency.P999), allocs, r.NodeCPU, r.ClientCPU, r.Errors, note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !measured {
		return nil
	}
	legend := "node µs/op: CPU time (user+system) of the node processes per operation; client µs/op: of the callers' processes (the load generator's included)"
	if coarse {
		legend += fmt.Sprintf("; ~ marks a figure from fewer than %d clock ticks of 10 ms: coarse, run longer", CoarseTicks)
	}
	_, err := fmt.Fprintln(w, legend)
	return err
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Report is what --json writes.
type Report struct {
	Env     map[string]string `json:"env"`
	Command string            `json:"command"`
	Results []Result          `json:"results"`
}

// WriteJSON writes rep to path, indented.
func WriteJSON(path string, rep Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return writeFile(path, append(b, '\n'))
}

// writeFile writes b to path, creating its directory if need be.
func writeFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// Environment describes the machine and the software versions.
func Environment() map[string]string {
	env := map[string]string{
		"go":   runtime.Version(),
		"os":   runtime.GOOS + "/" + runtime.GOARCH,
		"cpus": strconv.Itoa(runtime.NumCPU()),
		"cpu":  cpuModel(),
		"date": time.Now().UTC().Format(time.RFC3339),
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			switch d.Path {
			case "github.com/redis/go-redis/v9", "github.com/go-redsync/redsync/v4":
				env[d.Path] = d.Version
			}
		}
	}
	return env
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
