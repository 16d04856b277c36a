package loadtest

import (
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWriteSVGQuorum checks that a result with a QuorumLatency gets its
// panel (every node, its share, the quorum-th fastest node and the round)
// and that one without gets none, in a well-formed SVG.
func TestWriteSVGQuorum(t *testing.T) {
	ms := time.Millisecond
	d := func(p50, p90, p99 time.Duration) Dist { return Dist{P50: p50, P90: p90, P99: p99, Max: p99} }
	with := Result{Impl: "redquorum", Scenario: "one", Title: "1 caller", samples: []time.Duration{ms / 2, ms, 2 * ms},
		Quorum: &QuorumLatency{Quorum: 2, Rounds: 100, Round: d(ms, 2*ms, 3*ms), Kth: d(ms, 2*ms, 3*ms), Nodes: []NodeLatency{
			{Node: "n0:6379", Latency: d(ms/2, ms, 2*ms), Decided: 0.25},
			{Node: "n1:6379", Latency: d(ms, 2*ms, 3*ms), Decided: 0.75},
			{Node: "slow:6379", Latency: d(40*ms, 41*ms, 45*ms), Decided: 0},
			{Node: "late:6379"}, // it never answered in time
		}}}
	without := Result{Impl: "other", Scenario: "two", Title: "hot key", samples: []time.Duration{ms, 3 * ms}}
	svg := func(rs ...Result) string {
		path := filepath.Join(t.TempDir(), "plot.svg")
		require.NoError(t, WriteSVG(path, "title", rs))
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		dec := xml.NewDecoder(strings.NewReader(string(b)))
		for {
			_, err := dec.Token()
			if err == io.EOF {
				break
			}
			require.NoError(t, err, "the SVG is not well-formed XML")
		}
		return string(b)
	}
	got := svg(with, without)
	for _, s := range []string{"n0:6379", "n1:6379", "slow:6379", "decided 25%", "decided 75%", "decided 0%",
		"quorum-th fastest (2)", "round (100 rounds)", "redquorum, 1 caller: latency by node",
		"late:6379", "no answer before the rounds were decided"} {
		assert.Contains(t, got, s)
	}
	assert.NotContains(t, svg(without), "decided", "a result without quorum figures got a quorum panel")
}
