package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// overlaps returns the overlap count of the summary line in out.
func overlaps(t *testing.T, out string) int {
	t.Helper()
	m := regexp.MustCompile(`violations: overlaps=(\d+)`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}

// TestChaosCommand runs a short session on each backend, and its control,
// which must report violations; each writes its timeline.
func TestChaosCommand(t *testing.T) {
	for _, backend := range []string{"embedded", "native"} {
		t.Run(backend, func(t *testing.T) {
			args := []string{"chaos", "--backend", backend, "--duration", "2s", "--node-timeout", "300ms"}
			if backend == "native" {
				redisproc.Require(t)
				args = append(args, "--replicas")
			}
			leakcheck.Check(t)
			svg := filepath.Join(t.TempDir(), "timeline.svg")
			code, out, errOut := runCLI(t, append(args, "--fencing", "--svg", svg)...)
			require.Equal(t, 0, code, "%s%s", out, errOut)
			assert.Zero(t, overlaps(t, out))
			assert.Contains(t, out, "fence regressions=0")
			assert.FileExists(t, svg)

			code, out, errOut = runCLI(t, append(args, "--control", "--svg", svg)...)
			require.Equal(t, 0, code, "%s%s", out, errOut)
			assert.Positive(t, overlaps(t, out), "the control must report overlaps")
			assert.Contains(t, out, "the control's violations were reported")
			b, err := os.ReadFile(svg)
			require.NoError(t, err)
			assert.Contains(t, string(b), `fill="red"`, "the timeline shows the violations")
		})
	}
}

func TestChaosCommandUsage(t *testing.T) {
	for _, args := range [][]string{
		{"chaos", "--ttl", "0s"},
		{"chaos", "--backend", "docker"},
		{"chaos", "--workers", "0"},
		{"chaos", "extra"},
		{"chaos", "--backend", "embedded", "--replicas"},
	} {
		code, _, errOut := runCLI(t, args...)
		assert.Equal(t, 2, code, "%v: %s", args, errOut)
		assert.Contains(t, errOut, "redlock chaos: ")
	}
}
