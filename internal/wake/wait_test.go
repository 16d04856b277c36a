package wake

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
)

// TestWaitNil: a nil Wait, what Listen returns after Close, never fires,
// names nobody and closes without harm.
func TestWaitNil(t *testing.T) {
	var wt *Wait
	assert.Nil(t, wt.C())
	select {
	case <-wt.C():
		t.Fatal("a nil Wait fired")
	default:
	}
	assert.Empty(t, wt.Next())
	wt.Close()
	wt.Close()
}

// TestWaitClose: closing a Wait twice counts once, so that it does not end
// another wait for the same key; the key's wait ends with the last Wait
// closed.
func TestWaitClose(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 1)
	w := newWaker(t, c.clients, long)
	a, b := listen(w, "k"), listen(w, "k")
	a.Close()
	a.Close()
	assert.True(t, w.Waiting("k"), "a second Close ended another wait")
	assert.Equal(t, 1, w.Waits())
	b.Close()
	assert.False(t, w.Waiting("k"))
	assert.Zero(t, w.Waits())
	b.Close()
	assert.Equal(t, 1, w.Subscribed(), "the key stays subscribed for the idle time")
}

// TestWaitNext: Next names nobody before C is closed, and after it whom
// the announcement named, for every Wait of the key, also once closed.
func TestWaitNext(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 2)
	w := newWaker(t, c.clients, long)
	a, b := listen(w, "k"), listen(w, "k")
	waitSubscribed(t, c.clients, "k")
	assert.Empty(t, a.Next(), "before the announcement")
	c.publish(t, 1, protocol.ReleasedChannel+"k", "w1")
	waitClosed(t, a.C(), "no wake on k's release")
	require.True(t, closed(b.C()), "the waits for one key woke apart")
	assert.Equal(t, "w1", a.Next())
	assert.Equal(t, "w1", b.Next())
	a.Close()
	assert.Equal(t, "w1", a.Next(), "after Close")

	// A later wait hears only what comes after it.
	later := w.Listen("k", time.Now())
	assert.False(t, closed(later.C()))
	assert.Empty(t, later.Next(), "an earlier announcement named for a later wait")
	later.Close()
	b.Close()
}

// TestNamedSince: each node of a release names the first of its own line;
// NamedSince finds a name in any of the announcements heard after since,
// not only the last, and Named returns the last one that named a waiter.
func TestNamedSince(t *testing.T) {
	c := newCluster(t, 1)
	w := newWaker(t, c.clients, time.Minute)
	before := time.Now()
	wt := w.Listen("k", time.Time{})
	defer wt.Close()
	require.Eventually(t, func() bool { return !w.Confirming("k") && subscribers(t, c.clients, "k") == 1 }, bound, time.Millisecond)
	for _, name := range []string{"a", "b", ""} {
		c.publish(t, 0, protocol.ReleasedChannel+"k", name)
	}
	// The announcements arrive in order: once b's is heard, a's was.
	require.Eventually(t, func() bool { return w.NamedSince("k", "b", before) }, bound, time.Millisecond)
	assert.True(t, w.NamedSince("k", "a", before), "an announcement before the last")
	assert.False(t, w.NamedSince("k", "a", time.Now()), "not after since")
	assert.False(t, w.NamedSince("k", "c", before), "never named")
	next, _ := w.Named("k")
	assert.Equal(t, "b", next, "the last announcement that named a waiter")
}
