package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// WorkerEnv is the environment variable that carries a [WorkerSpec], as
// JSON, to a worker process of a scenario with Procs set.
const WorkerEnv = "REDQUORUM_LOADTEST_WORKER"

// WorkerSpec is one caller of a scenario, run in a process of its own.
type WorkerSpec struct {
	Impl     string
	Scenario Scenario
	Addrs    []string
	Caller   int
	Prefix   string
	// The worker locks from its start until Deadline and records from
	// Start: the time before is its warm-up.
	Start, Deadline time.Time
	Out             string // where the worker writes what it measured
	// Settings are the program's own, from Runner.Settings.
	Settings map[string]string
}

// WorkerFromEnv returns the spec of this process when it is a worker, and
// false otherwise.
func WorkerFromEnv() (WorkerSpec, bool, error) {
	v := os.Getenv(WorkerEnv)
	if v == "" {
		return WorkerSpec{}, false, nil
	}
	var spec WorkerSpec
	err := json.Unmarshal([]byte(v), &spec)
	return spec, true, err
}

// RunWorker runs the caller of spec through a Locker of impl, and writes
// what it measured from spec.Start to spec.Out.
func RunWorker(ctx context.Context, impl Impl, spec WorkerSpec) error {
	l, closeFn, err := impl.New(spec.Addrs)
	if err != nil {
		return fmt.Errorf("%s: %w", impl.Name, err)
	}
	defer closeFn()
	keys := callerKeys(spec.Scenario, spec.Prefix, spec.Caller)
	if wait := time.Until(spec.Start); wait > 0 {
		callerLoop(ctx, l, spec.Scenario, keys, spec.Start) // warm-up
	}
	c := callerLoop(ctx, l, spec.Scenario, keys, spec.Deadline)
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return os.WriteFile(spec.Out, b, 0o644)
}

// procStartup is how long the worker processes get to start and warm up
// before the measured time begins.
const procStartup = 2 * time.Second

// runProcs runs sc with each caller in a worker process that r.Spawn makes.
func (r *Runner) runProcs(ctx context.Context, impl Impl, sc Scenario, addrs, nodes []string, prefix string) (Result, error) {
	if r.Spawn == nil {
		return Result{}, errors.New("loadtest: scenario " + sc.ID + " runs callers in processes of their own, and the Runner has no Spawn")
	}
	dir, err := os.MkdirTemp("", "redquorum-loadtest-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	start := time.Now().Add(procStartup + r.Warmup)
	deadline := start.Add(sc.Duration)
	cmds := make([]*exec.Cmd, sc.Callers)
	outs := make([]*strings.Builder, sc.Callers)
	for w := range cmds {
		spec := WorkerSpec{Impl: impl.Name, Scenario: sc, Addrs: addrs, Caller: w, Prefix: prefix,
			Start: start, Deadline: deadline, Out: filepath.Join(dir, strconv.Itoa(w)+".json"), Settings: r.Settings}
		b, err := json.Marshal(spec)
		if err != nil {
			return Result{}, err
		}
		cmds[w] = r.Spawn(ctx)
		cmds[w].Env = append(os.Environ(), WorkerEnv+"="+string(b))
		outs[w] = new(strings.Builder)
		cmds[w].Stdout, cmds[w].Stderr = outs[w], outs[w]
		if err := cmds[w].Start(); err != nil {
			return Result{}, fmt.Errorf("loadtest: start worker %d: %w", w, err)
		}
	}
	cpu := ticksBetween(ctx, start, deadline, r.NodePIDs)
	pids := make([]int, len(cmds))
	for w, cmd := range cmds {
		pids[w] = cmd.Process.Pid
	}
	clientCPU := ticksBetween(ctx, start, deadline, pids)
	var counting chan commandsOrError
	if r.CountCommands {
		counting = commandsBetween(ctx, nodes, start, deadline)
	}
	stop := r.progress(impl.Name, sc)
	var errs []error
	callers := make([]caller, sc.Callers)
	for w, cmd := range cmds {
		err := cmd.Wait()
		if err == nil {
			var b []byte
			if b, err = os.ReadFile(filepath.Join(dir, strconv.Itoa(w)+".json")); err == nil {
				err = json.Unmarshal(b, &callers[w])
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("worker %d: %w: %s", w, err, outs[w]))
		}
	}
	stop()
	ticks, clientTicks := <-cpu, <-clientCPU
	var counted commandsOrError
	if counting != nil {
		counted = <-counting
	}
	if err := errors.Join(append(errs, ticks.err, counted.err)...); err != nil {
		return Result{}, fmt.Errorf("loadtest: %s in %s: %w", impl.Name, sc.ID, err)
	}
	res := gather(callers, sc, deadline.Sub(start))
	if r.NodePIDs != nil {
		res.NodeCPU = newNodeCPU(ticks.n, res.Ops)
	}
	if clientTicks.err == nil {
		// A worker that has already exited at the deadline (it writes its
		// results and ends) leaves the figure out rather than failing the run.
		res.ClientCPU = newNodeCPU(clientTicks.n, res.Ops)
	}
	if counting != nil {
		res.Commands = newCommands(counted.calls, counted.usec, res.Ops)
	}
	return res, nil
}

// commandsOrError is what commandsBetween counted, or the error that
// stopped it.
type commandsOrError struct {
	calls, usec map[string]int64
	err         error
}

// commandsBetween resets the command statistics of the nodes at from and
// reads them at to, and sends them on the returned channel (buffered).
func commandsBetween(ctx context.Context, nodes []string, from, to time.Time) chan commandsOrError {
	ch := make(chan commandsOrError, 1)
	go func() {
		var c commandsOrError
		if c.err = sleepUntil(ctx, from); c.err == nil {
			c.err = resetCommands(ctx, nodes)
		}
		if c.err == nil {
			c.err = sleepUntil(ctx, to)
		}
		if c.err == nil {
			c.calls, c.usec, c.err = readCommands(ctx, nodes)
		}
		ch <- c
	}()
	return ch
}

// ticksOrError is a count of clock ticks, or the error that stopped it.
type ticksOrError struct {
	n   int64
	err error
}

// ticksBetween reads the CPU time of pids at from and at to. It sends the
// difference on the returned channel, which is buffered, at to or when ctx
// ends.
func ticksBetween(ctx context.Context, from, to time.Time, pids []int) <-chan ticksOrError {
	ch := make(chan ticksOrError, 1)
	go func() {
		var t ticksOrError
		t0, err := sleepThenTicks(ctx, from, pids)
		if err == nil {
			var t1 int64
			t1, err = sleepThenTicks(ctx, to, pids)
			t.n = t1 - t0
		}
		t.err = err
		ch <- t
	}()
	return ch
}

// sleepThenTicks waits until t, then returns the ticks of pids.
func sleepThenTicks(ctx context.Context, t time.Time, pids []int) (int64, error) {
	if err := sleepUntil(ctx, t); err != nil {
		return 0, err
	}
	return nodeTicks(pids)
}

// sleepUntil waits until t, or until ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
