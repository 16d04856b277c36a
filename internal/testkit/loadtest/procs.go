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
func (r *Runner) runProcs(ctx context.Context, impl Impl, sc Scenario, addrs []string, prefix string) (Result, error) {
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
	if err := errors.Join(errs...); err != nil {
		return Result{}, fmt.Errorf("loadtest: %s in %s: %w", impl.Name, sc.ID, err)
	}
	return gather(callers, sc, deadline.Sub(start)), nil
}
