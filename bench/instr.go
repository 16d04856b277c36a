package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/locktest/loadtest"
	"github.com/redquorum/redquorum/redlock"
)

// nodeInstructions counts the instructions that one redis-server runs per
// lock+unlock for each of impls: the server runs under valgrind's
// callgrind, which counts instructions, not seconds, so the figure is the
// same from run to run whatever else the machine does (within a few
// instructions per operation: the keys' names and the random tokens
// differ). Each implementation locks and unlocks n distinct keys one after
// the other on that one node (a quorum of one), after a warm-up; the
// counters are zeroed before the measured operations and read after them.
// It needs valgrind (Debian's package) and prints one line per
// implementation.
func nodeInstructions(ctx context.Context, names []string, n int, lineWaiters []int) error {
	// Under valgrind the server is some 50 times slower: the node timeouts
	// are long, so that no call is retried.
	impls, err := implsNamed(allImpls(&redlock.Options{NodeTimeout: 2 * time.Second}), names)
	if err != nil {
		return fmt.Errorf("--impl: %w", err)
	}
	for _, tool := range []string{"valgrind", "callgrind_control", "redis-server"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("--node-instructions needs %s on PATH (apt-get install valgrind)", tool)
		}
	}
	dir, err := os.MkdirTemp("", "bench-callgrind-")
	if err != nil {
		return err
	}
	if os.Getenv("BENCH_CALLGRIND_KEEP") == "" {
		defer os.RemoveAll(dir)
	} else {
		fmt.Printf("callgrind dumps kept in %s\n", dir)
	}
	fmt.Printf("instructions that one redis-server (under callgrind) runs per lock+unlock, %d sequential operations on distinct keys\n\n", n)
	fmt.Printf("%-24s %14s\n", "impl", "instructions/op")
	for _, im := range impls {
		per, err := instructionsPerOp(ctx, im, n, dir)
		if err != nil {
			return fmt.Errorf("%s: %w", im.Name, err)
		}
		fmt.Printf("%-24s %14.0f\n", im.Name, per)
	}
	var strategies []protocol.Strategy
	for _, im := range impls {
		if st, ok := strategyOf(im.Name); ok && !slices.Contains(strategies, st) {
			strategies = append(strategies, st)
		}
	}
	for _, st := range strategies {
		for _, waiters := range lineWaiters {
			counts, err := contendedInstructions(ctx, dir, n, waiters, st)
			if err != nil {
				return fmt.Errorf("contended, %s, %d waiters: %w", strategyNames[st], waiters, err)
			}
			fmt.Printf("\nredquorum's scripts on a hot key, waiting %s, %d waiters in line, %d of each (see contendedInstructions)\n\n", strategyNames[st], waiters, n)
			for _, c := range counts {
				fmt.Printf("%-64s %14.0f\n", c.name, c.per)
			}
		}
	}
	return nil
}

// instructionsPerOp starts a redis-server under callgrind, runs n
// lock+unlocks of im on it and returns the instructions the server ran
// per operation.
func instructionsPerOp(ctx context.Context, im loadtest.Impl, n int, dir string) (float64, error) {
	return underCallgrind(ctx, dir, im.Name, n, func(addr string) (func(string, int) error, func(), error) {
		locker, closeLocker, err := im.New([]string{addr})
		if err != nil {
			return nil, nil, err
		}
		return func(phase string, i int) error {
			u, err := locker.Lock(ctx, phase+":"+strconv.Itoa(i), 30*time.Second)
			if err != nil {
				return err
			}
			return u.Unlock(ctx)
		}, closeLocker, nil
	})
}

// underCallgrind starts a redis-server under callgrind, makes the
// operation op with setup on its address, runs op 200 times to warm up,
// then n times, and returns the instructions the server ran per measured
// operation (the counters are zeroed before them and dumped after them).
// op gets the phase, "warm" or "k", and the operation's number in it.
func underCallgrind(ctx context.Context, dir, name string, n int, setup func(addr string) (op func(phase string, i int) error, done func(), err error)) (float64, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	out := filepath.Join(dir, name+".out")
	srv := exec.CommandContext(ctx, "valgrind", "--tool=callgrind", "--callgrind-out-file="+out,
		"redis-server", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no")
	srv.Dir = dir
	if err := srv.Start(); err != nil {
		return 0, err
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := waitListening(ctx, addr, time.Minute); err != nil {
		return 0, err
	}
	op, done, err := setup(addr)
	if err != nil {
		return 0, err
	}
	defer done()
	for i := range 200 {
		if err := op("warm", i); err != nil {
			return 0, err
		}
	}
	time.Sleep(200 * time.Millisecond) // the last answer and any late work
	pid := strconv.Itoa(srv.Process.Pid)
	if err := exec.CommandContext(ctx, "callgrind_control", "--zero", pid).Run(); err != nil {
		return 0, fmt.Errorf("callgrind_control --zero: %w", err)
	}
	for i := range n {
		if err := op("k", i); err != nil {
			return 0, err
		}
	}
	time.Sleep(200 * time.Millisecond)
	before, _ := filepath.Glob(out + "*")
	if err := exec.CommandContext(ctx, "callgrind_control", "--dump", pid).Run(); err != nil {
		return 0, fmt.Errorf("callgrind_control --dump: %w", err)
	}
	var dump string
	for deadline := time.Now().Add(30 * time.Second); dump == "" && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		after, _ := filepath.Glob(out + "*")
		for _, f := range after {
			if !slices.Contains(before, f) {
				dump = f
			}
		}
	}
	if dump == "" {
		return 0, errors.New("callgrind wrote no dump")
	}
	total, err := callgrindTotal(dump)
	if err != nil {
		return 0, err
	}
	return float64(total) / float64(n), nil
}

// callgrindTotal reads the instruction count ("summary:" or "totals:") of
// a callgrind dump, waiting for the file to be complete.
func callgrindTotal(file string) (int64, error) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		f, err := os.Open(file)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			for _, label := range []string{"totals:", "summary:"} {
				if rest, ok := strings.CutPrefix(sc.Text(), label); ok {
					_ = f.Close()
					return strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
				}
			}
		}
		_ = f.Close()
	}
	return 0, fmt.Errorf("%s: no instruction total", file)
}

// waitListening waits until addr accepts connections.
func waitListening(ctx context.Context, addr string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			return c.Close()
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("redis-server under callgrind did not listen on %s: %w", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
