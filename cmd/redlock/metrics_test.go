package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/redlock"
)

// scrape returns the exposition of m as served over HTTP.
func scrape(t *testing.T, m *metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	assert.Equal(t, "text/plain; version=0.0.4; charset=utf-8", rec.Header().Get("Content-Type"))
	return rec.Body.String()
}

// sampleLine matches a sample of the text format: name, labels, value.
var sampleLine = regexp.MustCompile(`^([a-z_]+)(\{[^}]*\})? (\S+)$`)

// samples parses an exposition into name+labels → value, checking that
// every line is a comment or a sample.
func samples(t *testing.T, text string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "# HELP ") || strings.HasPrefix(line, "# TYPE ") {
			continue
		}
		m := sampleLine.FindStringSubmatch(line)
		require.NotNil(t, m, "not a sample: %q", line)
		v, err := strconv.ParseFloat(m[3], 64)
		require.NoError(t, err, line)
		out[m[1]+m[2]] = v
	}
	return out
}

func TestMetricsExposition(t *testing.T) {
	m := newMetrics()
	o := m.observer()
	ctx := context.Background()
	round := redlock.Round{Nodes: []redlock.Vote{
		{Node: "a:1", Outcome: redlock.VoteGranted, Latency: 300 * time.Microsecond},
		{Node: `b"2`, Outcome: redlock.VoteGranted, Latency: 2 * time.Millisecond},
		{Node: "c:3", Outcome: redlock.VoteFailed, Latency: time.Millisecond, Err: errors.New("refused")},
	}}
	o.End(ctx, redlock.Event{Op: redlock.OpLock, Outcome: redlock.Obtained, Duration: 3 * time.Millisecond, Rounds: []redlock.Round{round}})
	o.End(ctx, redlock.Event{Op: redlock.OpLock, Outcome: redlock.Obtained, Duration: 40 * time.Second})
	o.End(ctx, redlock.Event{Op: redlock.OpUnlock, Outcome: redlock.Released, Ended: true, Held: 20 * time.Millisecond, Rounds: []redlock.Round{round}})
	o.End(ctx, redlock.Event{Op: redlock.OpUnlock, Outcome: redlock.Lost})
	o.Do(ctx, redlock.DoEvent{Outcome: redlock.Extended, Extension: 1})
	o.Do(ctx, redlock.DoEvent{Outcome: redlock.Lost})
	o.Node(ctx, redlock.NodeEvent{Node: "c:3", Change: redlock.Unreachable})
	o.Node(ctx, redlock.NodeEvent{Node: "a:1", Change: redlock.GuardEntered})
	o.Node(ctx, redlock.NodeEvent{Node: "a:1", Change: redlock.GuardLeft})

	text := scrape(t, m)
	got := samples(t, text)
	for name, want := range map[string]float64{
		`redquorum_operations_total{op="lock",outcome="obtained"}`:                         2,
		`redquorum_operations_total{op="unlock",outcome="released"}`:                       1,
		`redquorum_operations_total{op="unlock",outcome="lost"}`:                           1,
		`redquorum_lock_wait_seconds_bucket{op="lock",outcome="obtained",le="0.0025"}`:     0,
		`redquorum_lock_wait_seconds_bucket{op="lock",outcome="obtained",le="0.005"}`:      1,
		`redquorum_lock_wait_seconds_bucket{op="lock",outcome="obtained",le="30"}`:         1,
		`redquorum_lock_wait_seconds_bucket{op="lock",outcome="obtained",le="+Inf"}`:       2,
		`redquorum_lock_wait_seconds_count{op="lock",outcome="obtained"}`:                  2,
		`redquorum_lock_wait_seconds_sum{op="lock",outcome="obtained"}`:                    40.003,
		`redquorum_lock_hold_seconds_bucket{le="0.025"}`:                                   1,
		`redquorum_lock_hold_seconds_count`:                                                1,
		`redquorum_node_latency_seconds_bucket{node="a:1",request="acquire",le="0.00025"}`: 0,
		`redquorum_node_latency_seconds_bucket{node="a:1",request="acquire",le="0.0005"}`:  1,
		`redquorum_node_latency_seconds_count{node="a:1",request="release"}`:               1,
		`redquorum_node_latency_seconds_count{node="b\"2",request="acquire"}`:              1,
		`redquorum_locks_held`:                   1,
		`redquorum_node_unreachable{node="c:3"}`: 1,
		`redquorum_node_guarded{node="a:1"}`:     0,
		`redquorum_do_extensions_total`:          1,
	} {
		if assert.Contains(t, got, name) {
			assert.InDelta(t, want, got[name], 1e-9, name)
		}
	}
	assert.NotContains(t, text, `node="c:3",request`, "a failed request has no latency")
	for _, fam := range []string{"redquorum_operations_total counter", "redquorum_lock_wait_seconds histogram", "redquorum_lock_hold_seconds histogram",
		"redquorum_node_latency_seconds histogram", "redquorum_locks_held gauge", "redquorum_node_guarded gauge",
		"redquorum_node_unreachable gauge", "redquorum_do_extensions_total counter"} {
		assert.Contains(t, text, "# TYPE "+fam+"\n")
	}
}

func TestBenchServesMetrics(t *testing.T) {
	leakcheck.Check(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	type result struct {
		code        int
		out, errOut string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := runCLI(t, "bench", "--duration", "1s", "--callers", "2", "--quiet", "--metrics", addr)
		done <- result{code, out, errOut}
	}()
	var text string
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		text = string(b)
		return strings.Contains(text, `redquorum_operations_total{op="unlock",outcome="released"}`)
	}, 10*time.Second, 20*time.Millisecond, "metrics served while the bench runs")
	got := samples(t, text)
	assert.Positive(t, got[`redquorum_operations_total{op="lock",outcome="obtained"}`])
	res := <-done
	require.Equal(t, 0, res.code, "stdout:\n%s\nstderr:\n%s", res.out, res.errOut)
	assert.Contains(t, res.errOut, "metrics at http://"+addr+"/metrics")
	_, err = http.Get("http://" + addr + "/metrics")
	assert.Error(t, err, "the server stops with the bench")
}
