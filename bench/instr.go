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

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/loadtest"
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
func nodeInstructions(ctx context.Context, names []string, n int) error {
	// Under valgrind the server is some 50 times slower: the node timeouts
	// are long, so that no call is retried.
	opts := &redlock.Options{NodeTimeout: 2 * time.Second}
	all := []loadtest.Impl{redsyncImpl(), loadtest.Redquorum(opts), loadtest.RedquorumUser(opts),
		bareImplTimeout("bare-scripts", bareScripts, 2*time.Second), bareImplTimeout("bare-min", bareMin, 2*time.Second), bareImplTimeout("bare-pipe", barePipe, 2*time.Second),
		bareImplTimeout("bare-noop", bareNoop, 2*time.Second)}
	var impls []loadtest.Impl
	for _, name := range names {
		i := slices.IndexFunc(all, func(i loadtest.Impl) bool { return i.Name == name })
		if i < 0 {
			return fmt.Errorf("--impl %q: no such implementation", name)
		}
		impls = append(impls, all[i])
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
	fmt.Printf("%-16s %14s\n", "impl", "instructions/op")
	for _, im := range impls {
		per, err := instructionsPerOp(ctx, im, n, dir)
		if err != nil {
			return fmt.Errorf("%s: %w", im.Name, err)
		}
		fmt.Printf("%-16s %14.0f\n", im.Name, per)
	}
	if !slices.ContainsFunc(impls, func(i loadtest.Impl) bool { return strings.HasPrefix(i.Name, "redquorum") }) {
		return nil
	}
	figures, err := contendedInstructions(ctx, dir, n)
	if err != nil {
		return fmt.Errorf("contended: %w", err)
	}
	fmt.Printf("\nredquorum's scripts on a hot key, %d of each (see contendedInstructions)\n\n", n)
	for _, f := range figures {
		fmt.Printf("%-60s %14.0f\n", f.name, f.per)
	}
	return nil
}

// count is one line of contendedInstructions: instructions per operation.
type count struct {
	name string
	per  float64
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

// contendedInstructions returns the instructions one redis-server runs
// for the scripts of a hot key that the uncontended lock+unlock never
// runs, over n of each, as redquorum sends them (internal/protocol):
//
//   - a waiter's later round that joins the key's line for a handoff while
//     another token holds the key (seven waiters of seven clients taking
//     turns, each round replacing its waiter's previous entry);
//   - a waiter's first round that joins, of a client that waited for the
//     key lately, which looks for the client's entries (Join.Entries MayHave),
//     and the same round of a client that knows it has none left
//     (Join.Entries Cleared): each waiter's previous entry is taken off before
//     its next round, as a handoff's ZPOPMIN does, by a ZREM that both
//     figures count;
//   - an unlock's release that hands the key off to the first of the
//     line (with the SET and ZADD that put the lock and the waiter back
//     before each, the same for every version of the scripts).
func contendedInstructions(ctx context.Context, dir string, n int) ([]count, error) {
	var figures []count
	for _, round := range []struct {
		name           string
		first, cleared bool
	}{
		{"a waiter's round that joins the line", false, false},
		{"a waiter's first round that joins, looking for old entries", true, false},
		{"a waiter's first round that joins, its client cleared", true, true},
	} {
		per, err := joinInstructions(ctx, dir, n, round.first, round.cleared)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", round.name, err)
		}
		figures = append(figures, count{round.name, per})
	}
	per, err := handoffInstructions(ctx, dir, n)
	if err != nil {
		return nil, err
	}
	return append(figures, count{"a release that hands the key off", per}), nil
}

// joinInstructions counts the join rounds of contendedInstructions: later
// rounds, or first rounds (looking for the client's old entries unless
// cleared).
func joinInstructions(ctx context.Context, dir string, n int, first, cleared bool) (float64, error) {
	const waiters = 7
	return underCallgrind(ctx, dir, fmt.Sprintf("join-%v-%v", first, cleared), n, func(addr string) (func(string, int) error, func(), error) {
		c := redis.NewClient(redlock.NodeOptions(addr))
		if err := c.HSet(ctx, protocol.StateKey, "g", "0").Err(); err != nil {
			return nil, nil, err
		}
		if err := c.Set(ctx, "hot", "holder", time.Hour).Err(); err != nil {
			return nil, nil, err
		}
		ps := make([]*protocol.Protocol, waiters)
		ids, prev, entries := make([]string, waiters), make([]string, waiters), make([]string, waiters)
		for w := range ps {
			ps[w] = protocol.New(redlock.DefaultRestartGuard, false, protocol.Handoff, "").WithHandChannel(protocol.HandChannel + strconv.Itoa(w))
			ids[w] = protocol.NewToken("bench") // a waiter's id is as long as its rounds' tokens
		}
		return func(_ string, i int) error {
			w := i % waiters
			ch := protocol.HandChannel + strconv.Itoa(w)
			token := protocol.NewToken("bench")
			a := protocol.Acquire{Keys: []string{"hot", protocol.StateKey}, Token: token, TTL: 10 * time.Second,
				Join: protocol.Join{Place: ids[w], Ticket: int64(w), Channel: ch, Prev: prev[w], Entries: protocol.MayHave}}
			if first {
				if entries[w] != "" {
					if err := c.ZRem(ctx, protocol.LinePrefix+"hot", entries[w]).Err(); err != nil {
						return err
					}
				}
				a.Join.Place, a.Join.Prev, a.Join.Entries = token, "", protocol.MayHave
				if cleared {
					a.Join.Entries = protocol.Cleared
				}
				entries[w] = token + "|" + token + "|10000|" + ch
			}
			r, err := ps[w].Run(ctx, c, ps[w].AcquireCmd(a))
			if err != nil {
				return err
			}
			if reply, err := protocol.DecodeAcquire(r); err != nil || reply.Kind != protocol.Taken {
				return fmt.Errorf("join round: %v, %v", reply, err)
			}
			prev[w] = token
			return nil
		}, func() { _ = c.Close() }, nil
	})
}

// handoffInstructions counts the handoff releases of contendedInstructions.
func handoffInstructions(ctx context.Context, dir string, n int) (float64, error) {
	return underCallgrind(ctx, dir, "handoff", n, func(addr string) (func(string, int) error, func(), error) {
		c := redis.NewClient(redlock.NodeOptions(addr))
		if err := c.HSet(ctx, protocol.StateKey, "g", "0").Err(); err != nil {
			return nil, nil, err
		}
		ch := protocol.HandChannel + "waiter"
		sub := c.Subscribe(ctx, ch) // the waiter's client, which a handoff needs
		if _, err := sub.Receive(ctx); err != nil {
			return nil, nil, err
		}
		p := protocol.New(redlock.DefaultRestartGuard, false, protocol.Handoff, "")
		id, token := protocol.NewToken("bench"), protocol.NewToken("bench")
		entry := id + "|" + token + "|10000|" + ch
		return func(string, int) error {
			if err := c.Set(ctx, "hot", protocol.WaitedPrefix+"holder", time.Hour).Err(); err != nil {
				return err
			}
			if err := c.ZAdd(ctx, protocol.LinePrefix+"hot", redis.Z{Score: 1, Member: entry}).Err(); err != nil {
				return err
			}
			v, err := p.RunInt(ctx, c, p.Release(protocol.Release{Keys: []string{"hot"}, Token: "holder", TTL: 10 * time.Second, Announce: true}))
			if err == nil && (v != 1 || c.Get(ctx, "hot").Val() != protocol.WaitedPrefix+protocol.HandPrefix+token) {
				err = fmt.Errorf("release: %d, key %q: not handed off", v, c.Get(ctx, "hot").Val())
			}
			return err
		}, func() { _ = sub.Close(); _ = c.Close() }, nil
	})
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
