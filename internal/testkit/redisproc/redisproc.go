// Package redisproc starts native redis-server processes on 127.0.0.1 for
// benchmarks and tests: independent masters, or the masters of one Redis
// Cluster, without persistence, stopped and removed by [Servers.Stop].
package redisproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
)

// Servers are native redis-server processes started by [Start].
type Servers struct {
	Addrs   []string // host:port of each server
	Version string   // such as "7.0.15"

	procs []*proc    // nil once killed
	args  [][]string // each server's arguments beyond the defaults
	dir   string
	bin   string
	saved int // snapshots copied aside by Snapshot
}

// proc is one server process; done is closed once it has exited.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// kill kills the process at once (SIGKILL) and waits for it.
func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Start starts n redis-server processes on free ports of 127.0.0.1,
// without persistence, and waits until each accepts connections. On failure
// it stops those it started.
func Start(ctx context.Context, n int) (*Servers, error) {
	return start(ctx, n)
}

// start starts n servers with extra arguments, in parallel. On failure it
// stops those it started.
func start(ctx context.Context, n int, extra ...string) (*Servers, error) {
	s, err := newServers(ctx)
	if err != nil {
		return nil, err
	}
	s.procs, s.Addrs, s.args = make([]*proc, n), make([]string, n), make([][]string, n)
	g, gctx := errgroup.WithContext(ctx) // the first failure ends the others' waits
	for i := range n {
		g.Go(func() (err error) {
			s.procs[i], s.Addrs[i], err = s.launchAt(gctx, i, extra)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// newServers finds redis-server and makes the directory of its servers.
func newServers(ctx context.Context) (*Servers, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redisproc: redis-server not found on PATH: run scripts/ensure-redis-server.sh (make bench does)")
	}
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --version: %w", bin, err)
	}
	s := &Servers{Version: versionOf(string(out)), bin: bin}
	if s.dir, err = os.MkdirTemp("", "redquorum-bench-"); err != nil {
		return nil, err
	}
	return s, nil
}

// launch starts one more server with extra arguments (see launchAt) and
// returns its index in Addrs.
func (s *Servers) launch(ctx context.Context, extra ...string) (int, error) {
	i := len(s.Addrs)
	p, addr, err := s.launchAt(ctx, i, extra)
	if err != nil {
		return 0, err
	}
	s.procs, s.Addrs, s.args = append(s.procs, p), append(s.Addrs, addr), append(s.args, extra)
	return i, nil
}

// launchAt starts server i, without persistence, on a free port with
// extra arguments, in a directory of its own, waits until it accepts
// connections, and returns it with its address. It does not touch
// s.procs or s.Addrs, so that servers can start in parallel.
//
// A port is free only when asked: a process beside this one, such as a
// server of a test package running in parallel, can take it before the
// server binds it. The server then exits, and the other answers on the
// port. So launchAt checks that the server answering is the one it
// started, and otherwise starts it again on another port.
func (s *Servers) launchAt(ctx context.Context, i int, extra []string) (*proc, string, error) {
	dir := fmt.Sprintf("%s/%d", s.dir, i)
	var err error
	for range 5 {
		var p *proc
		var addr string
		var port int
		if port, err = pickPort(); err != nil {
			return nil, "", err
		}
		if p, addr, err = s.spawn(dir, port, extra, false); err != nil {
			return nil, "", err
		}
		if err = waitOwn(ctx, addr, p); err == nil {
			return p, addr, nil
		}
		p.kill()
		if ctx.Err() != nil {
			break
		}
	}
	return nil, "", err
}

// spawn starts one server on port, in dir, and returns it with its
// address. Unless keep is set, dir is emptied first. It does not wait for
// the server to accept connections.
func (s *Servers) spawn(dir string, port int, extra []string, keep bool) (*proc, string, error) {
	if !keep {
		_ = os.RemoveAll(dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	args := []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
		"--dir", dir, "--protected-mode", "no", "--maxmemory-policy", "noeviction", "--loglevel", "warning",
		"--repl-diskless-sync-delay", "0"} // a replica syncs at once, not after 5 s
	// A configuration file must come first: a sentinel's, or the server's
	// own, so that CONFIG REWRITE works.
	conf := filepath.Join(dir, "redis.conf")
	if len(extra) > 0 && strings.HasSuffix(extra[0], ".conf") {
		conf, extra = extra[0], extra[1:]
	} else if err := touch(conf); err != nil {
		return nil, "", err
	}
	args = append(append([]string{conf}, args...), extra...)
	cmd := exec.Command(s.bin, args...)
	cmd.Dir = dir
	// No orphans if the test or bench dies: SIGKILL, which also ends a
	// server stopped by SIGSTOP (a paused node), where SIGTERM would wait.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("redisproc: starting redis-server: %w", err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// PIDs returns the process ID of each server, in the order of Addrs; 0
// for a server that was killed or stopped.
func (s *Servers) PIDs() []int {
	pids := make([]int, len(s.Addrs))
	for i, p := range s.procs {
		if p != nil {
			pids[i] = p.cmd.Process.Pid
		}
	}
	return pids
}

// Kill kills server i at once (SIGKILL), as a crash would, and waits for it.
func (s *Servers) Kill(i int) {
	if p := s.procs[i]; p != nil {
		p.kill()
		s.procs[i] = nil
	}
}

// Restart kills server i (SIGKILL), as a crash would, and starts a new
// one on its address with its arguments, in an empty directory: the new
// server has none of the old one's data and a new replication ID, as after
// a restart without persistence. It waits until the new server accepts
// connections. Server i may be down already ([Servers.Kill]). On failure
// server i is left down.
func (s *Servers) Restart(ctx context.Context, i int) error {
	return s.restart(ctx, i, false)
}

// restart kills server i, when it is up, and starts it again on its
// address; keep keeps its directory, and so its snapshot.
func (s *Servers) restart(ctx context.Context, i int, keep bool) error {
	extra := s.args[i]
	s.Kill(i)
	_, port, _ := net.SplitHostPort(s.Addrs[i])
	n, err := strconv.Atoi(port)
	if err != nil {
		return err
	}
	p, addr, err := s.spawn(fmt.Sprintf("%s/%d", s.dir, i), n, extra, keep)
	if err != nil {
		return err
	}
	if err := waitOwn(ctx, addr, p); err != nil {
		p.kill()
		return err
	}
	s.procs[i] = p
	return nil
}

// Stop kills the servers, waits for them and removes their directory.
// Calling it again does nothing. It sends SIGKILL: their data goes with the
// directory, and Redis acts on SIGTERM only in its next serverCron, up to
// 100 ms later at the default hz (server.c, sigShutdownHandler).
func (s *Servers) Stop() {
	for _, p := range s.procs {
		if p != nil {
			_ = p.cmd.Process.Kill()
		}
	}
	for _, p := range s.procs {
		if p != nil {
			<-p.done
		}
	}
	s.procs = nil
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// pickPort returns a port to start a server on; tests replace it.
var pickPort = freePort

// freePort returns a port of 127.0.0.1 that was free when asked.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitOwn waits up to 5 s until the server on addr accepts connections,
// and fails when it is not p: p exited (its port was taken), or another
// process answers on the port.
func waitOwn(ctx context.Context, addr string, p *proc) error {
	pid := "process_id:" + strconv.Itoa(p.cmd.Process.Pid) + "\r"
	deadline := time.Now().Add(5 * time.Second)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("redisproc: redis-server for %s exited at start (%v); was the port taken?", addr, p.cmd.ProcessState)
		default:
		}
		info, err := reply(addr, "INFO", "server")
		if err == nil {
			if strings.Contains(info, pid) {
				return nil
			}
			return fmt.Errorf("redisproc: another server answers on %s", addr)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("redisproc: redis-server on %s did not start: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// command sends one command to addr and wants +OK.
func command(addr string, args ...string) error {
	r, err := reply(addr, args...)
	if err == nil && r != "OK" {
		err = fmt.Errorf("redisproc: %s on %s: %q", strings.Join(args, " "), addr, r)
	}
	return err
}

// reply sends one command to addr and returns its reply (see Do), within
// a few seconds.
func reply(addr string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return Do(ctx, addr, args...)
}

// Do sends one command on a new connection to addr and returns its reply:
// a status, integer or bulk string as text, an error reply as an error. It
// needs no client library, so it works with any server of the protocol,
// Sentinels included.
func Do(ctx context.Context, addr string, args ...string) (string, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if deadline, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(deadline)
	}
	var req strings.Builder
	fmt.Fprintf(&req, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&req, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, req.String()); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	switch {
	case line == "":
		return "", fmt.Errorf("redisproc: %s on %s: empty reply", strings.Join(args, " "), addr)
	case line[0] == '+' || line[0] == ':':
		return line[1:], nil
	case line[0] == '-':
		return "", fmt.Errorf("redisproc: %s on %s: %s", strings.Join(args, " "), addr, line[1:])
	case line[0] == '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("redisproc: %s on %s: reply %q", strings.Join(args, " "), addr, line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("redisproc: %s on %s: unexpected reply %q", strings.Join(args, " "), addr, line)
}

// versionOf extracts "7.0.15" from redis-server --version.
func versionOf(s string) string {
	for _, f := range strings.Fields(s) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return strings.TrimSpace(s)
}

// StartT is [Start] for a test: it skips or fails tb as [Require] does when
// redis-server is not installed, fails tb when the servers do not start,
// and stops them when tb ends.
func StartT(tb testing.TB, n int) *Servers {
	tb.Helper()
	Require(tb)
	s, err := Start(tb.Context(), n)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// Require makes tb skip when redis-server is not installed, or, under
// CI=true, fail: in CI, tests against real Redis must run, not skip.
func Require(tb testing.TB) {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("redis-server not found (%v); CI=true, and in CI tests against real Redis must run, not skip", err)
		}
		tb.Skipf("redis-server not found (%v); run scripts/ensure-redis-server.sh (with CI=true this fails)", err)
	}
}
