package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
	"github.com/redquorum/redquorum/locktest/loadtest"
	"github.com/redquorum/redquorum/redlock"
)

// cliEnv, when set, makes the test binary run the command line it holds
// (arguments separated by newlines) as the redlock command does, with the
// process's own stdout and stderr, and exit with its status.
const cliEnv = "REDLOCK_TEST_CLI"

// TestMain runs the test binary as a bench worker when redlock bench
// (under TestBench) starts it as one, and as the redlock command under
// cliEnv.
func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(cliEnv); ok {
		os.Exit(run(context.Background(), strings.Split(args, "\n"), os.Stdout, os.Stderr))
	}
	if spec, ok, err := loadtest.WorkerFromEnv(); ok {
		if err == nil {
			err = benchWorker(context.Background(), spec)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runCLI runs one command line in-process and returns its exit status and
// output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(t.Context(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestDemo(t *testing.T) {
	leakcheck.Check(t)
	code, out, errOut := runCLI(t, "demo", "--stock", "4", "--buyers", "12", "--servers", "3")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "1) Without a lock")
	assert.Contains(t, out, "goes down. 4 nodes remain, 3 are needed")
	assert.Contains(t, out, "4 items sold from a stock of 4: exactly right. 8 buyers were told it is sold out.")
	assert.Contains(t, out, "Lock keys left on the nodes that are up: 0.")
	assert.Empty(t, errOut)
}

func TestDemoOnGivenNodes(t *testing.T) {
	leakcheck.Check(t)
	addrs := startNodes(t, 3)
	code, out, errOut := runCLI(t, "demo", "--nodes", strings.Join(addrs, ","), "--stock", "2", "--buyers", "4", "--servers", "2")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "Using 3 Redis masters")
	assert.Contains(t, out, "node 2 of 3 goes down. 2 nodes remain, 2 are needed")
	assert.Contains(t, out, "exactly right")
	assert.Contains(t, out, "node "+addrs[1]+" through a local proxy")
}

// TestDemoOnFreshServers: redlock demo --nodes with its default settings
// (stock 10, 40 buyers, 4 app servers) on five brand-new redis-server
// processes sells exactly the stock and leaves no lock key, and nothing is
// logged: the node clients that the demo pings before making its Clients
// put no node of the new deployment in its restart guard. It runs the
// command in a process of its own, so that stderr is the one a user sees,
// the library's log included.
func TestDemoOnFreshServers(t *testing.T) {
	s := redisproc.StartT(t, 5)
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), cliEnv+"="+strings.Join([]string{"demo", "--nodes", strings.Join(s.Addrs, ",")}, "\n"))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	assert.Contains(t, out.String(), "Using 5 Redis masters")
	assert.Contains(t, out.String(), "A shop has 10 items in stock. 40 buyers arrive at once, served by 4 app servers.")
	assert.Contains(t, out.String(), "node 3 of 5 goes down. 4 nodes remain, 3 are needed")
	assert.Contains(t, out.String(), "10 items sold from a stock of 10: exactly right. 30 buyers were told it is sold out.")
	assert.Contains(t, out.String(), "Lock keys left on the nodes that are up: 0.")
	assert.Empty(t, errOut.String(), "nothing on stderr: no warning, no error")
}

func TestBench(t *testing.T) {
	leakcheck.Check(t)
	dir := t.TempDir()
	jsonFile, svgFile := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.svg")
	code, out, errOut := runCLI(t, "bench", "--duration", "300ms", "--callers", "2", "--slow-node", "5ms",
		"--json", jsonFile, "--svg", svgFile)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	for _, row := range []string{"lock+unlock, 1 caller", "lock+unlock, 2 callers, distinct keys", "one hot key, 2 contenders", "one hot key, 2 separate clients", "one hot key, 2 separate processes", "one hot key, 2 separate clients, a node cut off half-way", "2 separate clients, 64 shared keys", "one node +5ms each way"} {
		assert.Contains(t, out, row)
	}
	assert.Contains(t, errOut, "done", "progress goes to stderr")

	var rep loadtest.Report
	b, err := os.ReadFile(jsonFile)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rep))
	require.Len(t, rep.Results, 8)
	for _, r := range rep.Results {
		assert.Positive(t, r.Ops, r.Title)
		assert.Positive(t, r.Latency.P50, r.Title)
		assert.LessOrEqual(t, r.Latency.P50, r.Latency.P99, r.Title)
		assert.Zero(t, r.Overlaps, r.Title)
	}
	for _, i := range []int{2, 3, 4, 5} { // the hot key: in one client, in clients, in processes, with a node cut off
		assert.Len(t, rep.Results[i].Shares, 2, rep.Results[i].Title)
		assert.Positive(t, rep.Results[i].Gap.P50, rep.Results[i].Title)
	}
	assert.Equal(t, "hotkey-2-procs", rep.Results[4].Scenario)
	assert.Equal(t, "hotkey-2-clients-down", rep.Results[5].Scenario)
	svg, err := os.ReadFile(svgFile)
	require.NoError(t, err)
	assert.True(t, bytes.HasPrefix(svg, []byte("<svg")))
	assert.Equal(t, 8, bytes.Count(svg, []byte("<polyline")), "one curve per scenario")
}

func TestInspect(t *testing.T) {
	leakcheck.Check(t)
	addrs := startNodes(t, 5)
	nodes := redlock.NewNodes(addrs...)
	t.Cleanup(func() { closeNodes(nodes) })
	c, err := redlock.New(nodes, &redlock.Options{KeyPrefix: "p:", NodeTimeout: time.Second, Fencing: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	code, out, _ := runCLI(t, "inspect", "k", "--nodes", strings.Join(addrs, ","), "--prefix", "p:")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, `free: no node holds "p:k"`)

	l, err := c.Lock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, out, _ = runCLI(t, "inspect", "k", "--nodes", strings.Join(addrs, ","), "--prefix", "p:")
		return strings.Contains(out, "held: 5 of 5 nodes agree on holder "+l.Token()[:8]+"…")
	}, 5*time.Second, 10*time.Millisecond, out)
	assert.Contains(t, out, "node")
	// The fence was written back to the nodes that granted: a quorum at least.
	row := regexp.MustCompile(`(?m)^127\.0\.0\.1:\d+\s+` + regexp.QuoteMeta(l.Token()[:8]) + `…\s+` + regexp.QuoteMeta(protocol.Owner(l.Token())) + `\s+(59|60)\.\d+s\s+` + fmt.Sprint(l.Fence()) + `\s+serving$`)
	assert.GreaterOrEqual(t, len(row.FindAllString(out, -1)), 3, out)
	require.NoError(t, l.Unlock(t.Context()))
}

func TestInspectNoQuorum(t *testing.T) {
	leakcheck.Check(t)
	srvs := make([]*miniredis.Miniredis, 3)
	var addrs []string
	for i := range srvs {
		srvs[i] = miniredis.RunT(t)
		addrs = append(addrs, srvs[i].Addr())
	}
	require.NoError(t, srvs[0].Set("k", "aaaaaaaaaaaaaaaaaaaaaa"))
	srvs[0].SetTTL("k", time.Second)
	require.NoError(t, srvs[1].Set("k", "bbbbbbbbbbbbbbbbbbbbbb"))
	srvs[1].SetTTL("k", time.Second)
	code, out, _ := runCLI(t, "inspect", "--nodes", strings.Join(addrs, ","), "k")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "no quorum: at most 1 of 3 nodes agree on one holder, 2 needed")
	assert.Contains(t, out, "aaaaaaaa…")
	assert.Contains(t, out, "(free)")
}

// TestInspectStates: inspect shows the owner named in a token and each
// node's state, after one node lost its data and guarded itself on the
// next lock.
func TestInspectStates(t *testing.T) {
	leakcheck.Check(t)
	srvs, addrs := startServers(t, 3)
	c := newClient(t, addrs)
	warm, err := c.TryLock(t.Context(), "warm", time.Minute) // a new deployment: every node serves
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(t.Context()))
	srvs[0].FlushAll()
	l, err := c.TryLock(t.Context(), "k", time.Minute) // node 0 guards itself, 1 and 2 grant
	require.NoError(t, err)
	require.Eventually(t, func() bool { return srvs[0].Exists("p:" + protocol.StateKey) }, 5*time.Second, 5*time.Millisecond,
		"node 0's acquire lands after the round's quorum")
	owned := protocol.NewToken("web-1:4242")
	for _, m := range srvs[1:] {
		require.NoError(t, m.Set("p:o", owned))
		m.SetTTL("p:o", time.Minute)
	}

	code, out, errOut := runCLI(t, "inspect", "k", "--nodes", strings.Join(addrs, ","), "--prefix", "p:")
	require.Equal(t, 0, code, "%s%s", out, errOut)
	assert.Regexp(t, `(?m)^node\s+holder\s+owner\s+ttl\s+fence\s+state$`, out)
	assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(addrs[0])+`\s+\(free\)\s+-\s+-\s+-\s+guarded for (59|60)s$`, out)
	for _, a := range addrs[1:] {
		assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(a)+`\s+`+regexp.QuoteMeta(l.Token()[:8])+`…\s+`+regexp.QuoteMeta(protocol.Owner(l.Token()))+`\s+(59|60)\.\d+s\s+\d+\s+serving$`, out)
	}
	assert.Contains(t, out, "held: 2 of 3 nodes agree on holder "+l.Token()[:8]+"… (quorum 2)")

	_, out, _ = runCLI(t, "inspect", "o", "--nodes", strings.Join(addrs, ","), "--prefix", "p:")
	assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(addrs[1])+`\s+`+regexp.QuoteMeta(owned[:8])+`…\s+web-1:4242\s+`, out)
	assert.Contains(t, out, "held: 2 of 3 nodes agree")
	require.NoError(t, l.Unlock(t.Context()))
}

// TestInspectNodeDown: with one node down, inspect still shows the others
// and the verdict, and exits non-zero naming the node.
func TestInspectNodeDown(t *testing.T) {
	leakcheck.Check(t)
	srvs, addrs := startServers(t, 3)
	c := newClient(t, addrs)
	l, err := c.TryLock(t.Context(), "k", time.Minute)
	require.NoError(t, err)
	// TryLock returns once a quorum granted: the third node's grant may
	// land later, or not at all (on a busy machine its request is not
	// sent once the round is decided). The node to stop is one without
	// the key, or the last.
	holds := func(i int) bool { v, _ := srvs[i].Get("p:k"); return v == l.Token() }
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && !(holds(0) && holds(1) && holds(2)); {
		time.Sleep(time.Millisecond)
	}
	down := 2
	for i := range srvs {
		if !holds(i) {
			down = i
		}
	}
	srvs[down].Close()

	code, out, errOut := runCLI(t, "inspect", "k", "--nodes", strings.Join(addrs, ","), "--prefix", "p:")
	assert.Equal(t, 1, code)
	for i, a := range addrs {
		if i != down {
			assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(a)+`\s+`+regexp.QuoteMeta(l.Token()[:8])+`…\s+`+regexp.QuoteMeta(protocol.Owner(l.Token()))+`\s+\S+s\s+\d+\s+serving$`, out)
		}
	}
	assert.Regexp(t, `(?m)^`+regexp.QuoteMeta(addrs[down])+`\s+-\s+-\s+-\s+-\s+error: .*connection refused$`, out)
	assert.Contains(t, out, "held: 2 of 3 nodes agree on holder "+l.Token()[:8]+"…")
	assert.Contains(t, errOut, "redlock inspect: could not read every node: node "+addrs[down]+": ")
	assert.Equal(t, 1, strings.Count(errOut, "\n"), errOut)
}

// TestVerdict covers what inspect concludes from the nodes it could read.
func TestVerdict(t *testing.T) {
	a, b, down, free := keyRow{holder: "aaaaaaaaaa-a"}, keyRow{holder: "bbbbbbbbbb-b"}, keyRow{err: errors.New("down")}, keyRow{}
	// A node in its restart guard that still holds a (its data may be
	// older than its guard): not counted.
	guardedA := keyRow{holder: a.holder, state: nodeState{known: true, guardLeft: time.Minute}}
	for _, tc := range []struct {
		rows []keyRow
		want string
	}{
		{[]keyRow{a, a, down}, "held: 2 of 3 nodes agree on holder aaaaaaaa… (quorum 2)"},
		{[]keyRow{free, free, free}, `free: no node holds "k"`},
		{[]keyRow{a, b, free}, "no quorum: at most 1 of 3 nodes agree on one holder, 2 needed (a lock round"},
		{[]keyRow{a, free, down}, "unknown: 1 of 3 nodes agree on holder aaaaaaaa…, 2 needed, and the 1 node not read could make it"},
		{[]keyRow{free, down, down}, `unknown: no node read holds "k", and the 2 nodes not read could make the quorum of 2`},
		{[]keyRow{free, free, down}, `not held: no node read holds "k", and the 1 node not read cannot make the quorum of 2`},
		{[]keyRow{a, b, free, free, down}, "no quorum: at most 1 of 5 nodes agree on one holder, 3 needed, even counting the 1 node not read"},
		{[]keyRow{a, guardedA, free}, "unknown: 1 of 3 nodes agree on holder aaaaaaaa…, 2 needed, and the 1 node in its restart guard could make it"},
		{[]keyRow{guardedA, guardedA, down, free, free}, `unknown: no node read holds "k", and the 1 node not read and the 2 in their restart guard could make the quorum of 3`},
	} {
		assert.True(t, strings.HasPrefix(verdict("k", tc.rows), tc.want), "%s\nwant %s", verdict("k", tc.rows), tc.want)
	}
}

func TestErrors(t *testing.T) {
	leakcheck.Check(t)
	down := miniredis.RunT(t)
	downAddr := down.Addr()
	down.Close()
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "usage:"},
		{[]string{"fly"}, 2, `unknown command "fly"`},
		{[]string{"bench", "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"bench", "--duration", "soon"}, 2, `invalid value "soon" for flag -duration`},
		{[]string{"bench", "--duration", "0s"}, 2, "--duration 0s: must be positive"},
		{[]string{"bench", "--callers", "0"}, 2, "--callers 0: must be at least 1"},
		{[]string{"bench", "extra"}, 2, `unexpected argument "extra"`},
		{[]string{"demo", "--stock", "0"}, 2, "--stock 0: must be at least 1"},
		{[]string{"demo", "--nodes", "localhost"}, 2, `--nodes: address "localhost": missing port`},
		{[]string{"demo", "--nodes", "a:1,a:1"}, 2, "a:1 is listed twice"},
		{[]string{"inspect", "--nodes", "a:1"}, 2, "want exactly one KEY, got 0"},
		{[]string{"inspect", "k"}, 2, "--nodes is required"},
		{[]string{"guard"}, 2, "want a subcommand: status, end or fence"},
		{[]string{"guard", "lift"}, 2, `unknown subcommand "lift"`},
		{[]string{"guard", "end"}, 2, "--nodes is required"},
		{[]string{"guard", "end", "--nodes", "a:1", "now"}, 2, `unexpected argument "now"`},
		{[]string{"guard", "status", "--nodes", "a:1", "--yes"}, 2, "flag provided but not defined: -yes"},
		{[]string{"bench", "--nodes", downAddr}, 1, "node " + downAddr + " unreachable"},
		{[]string{"demo", "--nodes", downAddr}, 1, "node " + downAddr + " unreachable"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runCLI(t, tc.args...)
			assert.Equal(t, tc.code, code)
			assert.Contains(t, errOut, tc.msg)
			if tc.args != nil {
				assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
				assert.Empty(t, out)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"help"}, {"bench", "-h"}, {"demo", "--help"}, {"inspect", "-h"},
		{"guard", "-h"}, {"guard", "status", "-h"}, {"guard", "end", "--help"}} {
		code, out, errOut := runCLI(t, args...)
		assert.Equal(t, 0, code, args)
		assert.Contains(t, out, "usage", args)
		assert.Empty(t, errOut, args)
	}
	_, out, _ := runCLI(t, "-h")
	assert.Contains(t, out, "redlock guard end    --nodes NODE,... [--prefix P] [--yes]")
	_, out, _ = runCLI(t, "guard", "end", "-h")
	for _, s := range []string{"-yes", "vouch", "live lock key", "Redis Cluster", "does not set the fence counter f", `run "redlock guard fence"`} {
		assert.Contains(t, out, s)
	}
}

// startServers starts n in-process nodes for the test, and returns them
// with their addresses.
func startServers(t *testing.T, n int) ([]*miniredis.Miniredis, []string) {
	t.Helper()
	var srvs []*miniredis.Miniredis
	var addrs []string
	for range n {
		m := miniredis.RunT(t)
		m.ClockTTL(true)
		srvs = append(srvs, m)
		addrs = append(addrs, m.Addr())
	}
	return srvs, addrs
}

// newClient returns a Client with the restart guard on and the key prefix
// "p:" on the nodes at addrs.
func newClient(t *testing.T, addrs []string) *redlock.Client {
	t.Helper()
	nodes := redlock.NewNodes(addrs...)
	t.Cleanup(func() { closeNodes(nodes) })
	c, err := redlock.New(nodes, &redlock.Options{KeyPrefix: "p:", NodeTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// startNodes starts n in-process nodes for the test.
func startNodes(t *testing.T, n int) []string {
	t.Helper()
	_, addrs := startServers(t, n)
	return addrs
}

// TestInspectSemaphore: inspect shows the held slots of a semaphore and
// the writer of a read-write lock, with their owners.
func TestInspectSemaphore(t *testing.T) {
	leakcheck.Check(t)
	addrs := startNodes(t, 3)
	nodes := redlock.NewNodes(addrs...)
	t.Cleanup(func() { closeNodes(nodes) })
	c, err := redlock.New(nodes, &redlock.Options{NodeTimeout: time.Second, Owner: "builder"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	p, err := c.Semaphore("reports", 3).Acquire(t.Context(), time.Minute)
	require.NoError(t, err)
	var out string
	require.Eventually(t, func() bool {
		_, out, _ = runCLI(t, "inspect", "reports", "--semaphore", "3", "--nodes", strings.Join(addrs, ","))
		return strings.Contains(out, "held: 3 of 3 nodes agree on holder "+p.Lock().Token()[:8]+"…")
	}, 5*time.Second, 10*time.Millisecond, out)
	assert.Contains(t, out, fmt.Sprintf("slot %d (redquorum:sem:reports:%d):", p.Slot(), p.Slot()))
	assert.Contains(t, out, "builder")
	assert.Contains(t, out, "free on every node: slot ")

	w, err := c.RWMutex("prices").Lock(t.Context(), time.Minute)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, out, _ = runCLI(t, "inspect", "prices", "--rw", "--nodes", strings.Join(addrs, ","))
		return strings.Contains(out, "writer (redquorum:rw:prices:writer):")
	}, 5*time.Second, 10*time.Millisecond, out)
	assert.Contains(t, out, "held: 3 of 3 nodes agree on holder "+w.Token()[:8]+"…")
	code, _, errOut := runCLI(t, "inspect", "prices", "--rw", "--semaphore", "2", "--nodes", strings.Join(addrs, ","))
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "--semaphore and --rw together")
}
