package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// TestNodesFlagRefused: every command refuses a --nodes value that
// redlock.Open would refuse, and two addresses of one host:port, naming
// the bad value with its password hidden.
func TestNodesFlagRefused(t *testing.T) {
	commands := [][]string{{"demo"}, {"bench"}, {"inspect", "k"}, {"guard", "status"}, {"guard", "end"}, {"guard", "fence"}}
	for _, tc := range []struct{ nodes, want string }{
		{"localhost", `--nodes: address "localhost": missing port: want host:port, or a redis:// or rediss:// URL`},
		{"a:1,,b:2", `--nodes: address "": empty address`},
		{"a:1,b:0", `--nodes: address "b:0": port "0" is not a number from 1 to 65535`},
		{"redis://:secret@h:0", `--nodes: address "redis://:xxxxx@h:0": port "0" is not a number from 1 to 65535`},
		{"redis://u:secret@:6379", `--nodes: address "redis://u:xxxxx@:6379": no host`},
		{"http://h:1", `--nodes: address "http://h:1": unknown scheme "http"`},
		{"a:1,a:1", "--nodes: a:1 is listed twice; the nodes must be independent masters"},
		{"redis://:secret@a:1/0,redis://:secret@a:1/2", "--nodes: a:1 is listed twice"},
		{"a:1, rediss://u:secret@a:1", "--nodes: a:1 is listed twice"},
		{"redis://[::1]:1,[::1]:1", "--nodes: [::1]:1 is listed twice"},
	} {
		for _, cmd := range commands {
			args := append(append([]string{}, cmd...), "--nodes", tc.nodes)
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				code, out, errOut := runCLI(t, args...)
				assert.Equal(t, 2, code)
				name := cmd[0]
				if name == "guard" {
					name += " " + cmd[1]
				}
				assert.True(t, strings.HasPrefix(errOut, "redlock "+name+": "+tc.want), errOut)
				assert.NotContains(t, errOut, "secret")
				assert.Equal(t, 1, strings.Count(errOut, "\n"), "one line: %q", errOut)
				assert.Empty(t, out)
			})
		}
	}
}

// TestNodesWithPassword: on servers that require a password, every
// command takes the nodes as redis:// URLs, names them by host:port, and
// never prints the password; a wrong password fails with the node named.
func TestNodesWithPassword(t *testing.T) {
	leakcheck.Check(t)
	const password = "s3cret-pw"
	addrs := startRedis(t, 3)
	urls := make([]string, len(addrs))
	for i, a := range addrs {
		_, err := redisproc.Do(t.Context(), a, "CONFIG", "SET", "requirepass", password)
		require.NoError(t, err)
		urls[i] = "redis://:" + password + "@" + a + "/1"
	}
	nodes := strings.Join(urls, ",")
	noPassword := func(t *testing.T, out, errOut string) {
		t.Helper()
		assert.NotContains(t, out, password)
		assert.NotContains(t, errOut, password)
	}

	code, out, errOut := runCLI(t, "demo", "--nodes", nodes, "--stock", "2", "--buyers", "4", "--servers", "2")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "exactly right")
	assert.Contains(t, out, "Lock keys left on the nodes that are up: 0.")
	assert.Contains(t, out, "node "+addrs[1]+" through a local proxy")
	noPassword(t, out, errOut)

	code, out, errOut = runCLI(t, "guard", "status", "--nodes", nodes)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	for _, a := range addrs {
		assert.Regexp(t, `(?m)^`+a+`\s+\S`, out)
	}
	noPassword(t, out, errOut)

	code, out, errOut = runCLI(t, "inspect", "k", "--nodes", nodes)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, `free: no node holds "k"`)
	for _, a := range addrs {
		assert.Regexp(t, `(?m)^`+a+`\s+\(free\)`, out)
	}
	noPassword(t, out, errOut)

	code, out, errOut = runCLI(t, "bench", "--nodes", nodes, "--duration", "50ms", "--callers", "2", "--slow-node", "1ms", "--quiet")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "redquorum bench on 3 nodes: ["+strings.Join(addrs, " ")+"]")
	assert.Contains(t, out, "one node +1ms each way")
	noPassword(t, out, errOut)

	wrong := "redis://:badpw123@" + addrs[0] + "," + strings.Join(urls[1:], ",")
	code, out, errOut = runCLI(t, "demo", "--nodes", wrong)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "redlock demo: node "+addrs[0]+" unreachable: WRONGPASS")
	assert.NotContains(t, errOut, "badpw123")
	noPassword(t, out, errOut)
}
