package loadtest

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Commands counts the commands the nodes ran during a measured phase, by
// name, summed over the nodes. The counts are what INFO commandstats reports
// after a CONFIG RESETSTAT at the phase's start. Commands a script calls
// count under their own names as well as under the script's (evalsha).
type Commands struct {
	Calls map[string]int64   `json:"calls"`
	Usec  map[string]int64   `json:"usec"` // the servers' own time in each
	Ops   int                `json:"ops"`
	Per   map[string]float64 `json:"per_op"` // Calls / Ops
}

// String lists the calls per operation, most frequent first, as
// "evalsha 10.0 (4.1 µs), publish 2.5 (0.9 µs)". Each is the count per
// operation summed over the nodes, then the servers' time per call.
func (c *Commands) String() string {
	if c == nil || c.Ops == 0 {
		return "-"
	}
	names := slices.Collect(maps.Keys(c.Calls))
	slices.SortFunc(names, func(a, b string) int { // most calls first, then by name
		return cmp.Or(cmp.Compare(c.Calls[b], c.Calls[a]), strings.Compare(a, b))
	})
	var parts []string
	for _, n := range names {
		if c.Calls[n] == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.2f (%.1f µs)", n, c.Per[n], float64(c.Usec[n])/float64(c.Calls[n])))
	}
	return strings.Join(parts, ", ")
}

func newCommands(calls, usec map[string]int64, ops int) *Commands {
	c := &Commands{Calls: calls, Usec: usec, Ops: ops, Per: map[string]float64{}}
	for n, k := range calls {
		if ops > 0 {
			c.Per[n] = float64(k) / float64(ops)
		}
	}
	return c
}

// mergeCommands pools counts from several runs.
func mergeCommands(cs []*Commands) *Commands {
	calls, usec, ops := map[string]int64{}, map[string]int64{}, 0
	counted := false
	for _, c := range cs {
		if c == nil {
			continue
		}
		counted = true
		for n, k := range c.Calls {
			calls[n] += k
		}
		for n, k := range c.Usec {
			usec[n] += k
		}
		ops += c.Ops
	}
	if !counted {
		return nil
	}
	return newCommands(calls, usec, ops)
}

// resetCommands clears the command statistics of the nodes at addrs.
func resetCommands(ctx context.Context, addrs []string) error {
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, DisableIdentity: true})
		err := c.ConfigResetStat(ctx).Err()
		c.Close()
		if err != nil {
			return fmt.Errorf("loadtest: CONFIG RESETSTAT on %s: %w", a, err)
		}
	}
	return nil
}

// readCommands sums INFO commandstats over the nodes at addrs. It leaves out
// the commands that it and resetCommands send themselves: CONFIG RESETSTAT,
// INFO and the HELLO of the connection that reads. A HELLO counted is a
// connection that a client under test opened.
func readCommands(ctx context.Context, addrs []string) (calls, usec map[string]int64, err error) {
	calls, usec = map[string]int64{}, map[string]int64{}
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1, DisableIdentity: true})
		info, err := c.Info(ctx, "commandstats").Result()
		c.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("loadtest: INFO commandstats on %s: %w", a, err)
		}
		if err := parseCommandStats(info, calls, usec); err != nil {
			return nil, nil, fmt.Errorf("loadtest: INFO commandstats on %s: %w", a, err)
		}
	}
	for _, own := range []string{"config|resetstat", "info"} {
		delete(calls, own)
		delete(usec, own)
	}
	if calls["hello"] -= int64(len(addrs)); calls["hello"] <= 0 {
		delete(calls, "hello")
		delete(usec, "hello")
	}
	return calls, usec, nil
}

// parseCommandStats adds the lines "cmdstat_NAME:calls=C,usec=U,..." of
// info to calls and usec.
func parseCommandStats(info string, calls, usec map[string]int64) error {
	for line := range strings.Lines(info) {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		for field := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			var m map[string]int64
			switch k {
			case "calls":
				m = calls
			case "usec":
				m = usec
			default:
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("%s: %s: %w", name, field, err)
			}
			m[name] += n
		}
	}
	return nil
}
