package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/redlock"
)

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestElection: election shows that nobody leads, then the leader's owner,
// term, TTL and value; with --watch it follows a new value and the
// resignation.
func TestElection(t *testing.T) {
	leakcheck.Check(t)
	addrs := startNodes(t, 3)
	nodes := strings.Join(addrs, ",")
	c, err := redlock.Open(addrs, &redlock.Options{KeyPrefix: "p:", NodeTimeout: time.Second, Fencing: true, Owner: "sched-1"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	code, out, errOut := runCLI(t, "election", "sched", "--nodes", nodes, "--prefix", "p:")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "election \"sched\": no leader\n", out)

	lead, err := c.Election("sched").Campaign(t.Context(), "v1", time.Minute)
	require.NoError(t, err)
	code, out, errOut = runCLI(t, "election", "sched", "--nodes", nodes, "--prefix", "p:")
	require.Equal(t, 0, code, errOut)
	assert.Regexp(t, fmt.Sprintf(`^election "sched": leader sched-1, term %d, ttl (59|60)\.?\d*s, value "v1"\n$`, lead.Term()), out)

	ctx, cancel := context.WithCancel(t.Context())
	var watched syncBuffer
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"election", "sched", "--nodes", nodes, "--prefix", "p:", "--watch"}, &watched, &watched)
	}()
	seen := func(s string) {
		t.Helper()
		require.Eventually(t, func() bool { return strings.Contains(watched.String(), s) }, 10*time.Second, 5*time.Millisecond, watched.String())
	}
	seen(`value "v1"`)
	require.NoError(t, lead.Proclaim(t.Context(), "v2"))
	seen(`value "v2"`)
	require.NoError(t, lead.Resign(t.Context()))
	seen("no leader")
	cancel()
	assert.Equal(t, 0, <-done)
	assert.Len(t, strings.Split(strings.TrimSpace(watched.String()), "\n"), 3, watched.String())

	code, _, errOut = runCLI(t, "election", "--nodes", nodes)
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "want exactly one NAME")
}
