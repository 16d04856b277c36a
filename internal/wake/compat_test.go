package wake

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
)

// TestCompat: On returns one channel per key, Done ends one of its waits
// each, and Next says whom the announcement named until the last Done.
func TestCompat(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 1)
	w := NewLive(c.clients, long, clock.Real{}, protocol.LiveChannel+"test")
	t.Cleanup(w.Close)
	a, b := w.On("k"), w.On("k")
	require.NotNil(t, a)
	assert.Equal(t, a, b)
	waitSubscribed(t, c.srv, "k")
	require.Eventually(t, w.Live, bound, time.Millisecond, "the client's channel is not subscribed")
	c.srv[0].Publish(protocol.ReleasedChannel+"k", "w1")
	waitClosed(t, a, "no wake on k's release")
	assert.Equal(t, "w1", w.Next(a))
	w.Done("k", a)
	assert.Equal(t, "w1", w.Next(b), "before the last Done")
	w.Done("k", b)
	assert.Empty(t, w.Next(b), "after the last Done")
	w.Done("k", b) // once too often: harmless
	w.Done("k", nil)
	assert.Zero(t, w.Waits())
}
