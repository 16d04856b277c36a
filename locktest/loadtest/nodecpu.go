package loadtest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of the CPU times in /proc/PID/stat: USER_HZ, which
// is 100 on every Linux architecture Go supports (sysconf(_SC_CLK_TCK),
// `getconf CLK_TCK`).
const clockTick = 10 * time.Millisecond

// CoarseTicks is the number of clock ticks below which a node CPU figure is
// coarse. Each tick is 10 ms, so fewer than this many make the figure
// uncertain by more than 1%. Reports mark such a figure.
const CoarseTicks = 100

// nodeTicks returns the CPU time (user and system) that the processes pids
// have used so far, in clock ticks. A pid of 0 (a server that is gone) counts
// nothing.
func nodeTicks(pids []int) (int64, error) {
	var sum int64
	for _, pid := range pids {
		if pid == 0 {
			continue
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return 0, err
		}
		t, err := statTicks(string(b))
		if err != nil {
			return 0, fmt.Errorf("loadtest: /proc/%d/stat: %w", pid, err)
		}
		sum += t
	}
	return sum, nil
}

// statTicks returns utime+stime from the text of /proc/PID/stat. They are
// fields 14 and 15, counted after the command name in parentheses, which may
// hold spaces and parentheses itself.
func statTicks(stat string) (int64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in %q", stat)
	}
	f := strings.Fields(stat[i+1:]) // from field 3, the state
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(f))
	}
	utime, err := strconv.ParseInt(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime %q: %w", f[11], err)
	}
	stime, err := strconv.ParseInt(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime %q: %w", f[12], err)
	}
	return utime + stime, nil
}

// NodeCPU is the CPU time that processes used during a run: the nodes'
// (Result.NodeCPU), or the callers' (Result.ClientCPU).
type NodeCPU struct {
	// Ticks is the sum over the processes of utime+stime, in clock ticks of
	// 10 ms.
	Ticks int64 `json:"ticks"`
	// PerOp is Ticks in microseconds per operation of the run.
	PerOp float64 `json:"us_per_op"`
}

// newNodeCPU returns the node CPU of ticks used over ops operations.
func newNodeCPU(ticks int64, ops int) *NodeCPU {
	c := &NodeCPU{Ticks: ticks}
	if ops > 0 {
		c.PerOp = float64(time.Duration(ticks)*clockTick) / float64(time.Microsecond) / float64(ops)
	}
	return c
}

// Coarse reports whether c rests on fewer than [CoarseTicks] ticks.
func (c *NodeCPU) Coarse() bool { return c.Ticks < CoarseTicks }

// String formats c's figure per operation in µs, with a "~" in front when
// it is coarse, or "-" for a nil c (not measured).
func (c *NodeCPU) String() string {
	if c == nil {
		return "-"
	}
	s := fmt.Sprintf("%.0f", c.PerOp)
	if c.Coarse() {
		s = "~" + s
	}
	return s
}
