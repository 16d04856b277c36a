package waiting

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/quorum"
)

// fakeHost is a Client with no nodes: it records the releases sent aside.
type fakeHost struct {
	closing chan struct{}
	workers *quorum.Workers

	mu    sync.Mutex
	aside []protocol.Release
}

func newFakeHost(t *testing.T) *fakeHost {
	h := &fakeHost{closing: make(chan struct{}), workers: quorum.NewWorkers()}
	t.Cleanup(h.workers.Close)
	return h
}

func (h *fakeHost) Closing() <-chan struct{}   { return h.closing }
func (h *fakeHost) Enter() error               { return nil }
func (h *fakeHost) Exit()                      {}
func (h *fakeHost) CallTimeout() time.Duration { return time.Second }

func (h *fakeHost) Start(ctx context.Context, timeout time.Duration, fn func(ctx context.Context, node int) error) *quorum.Round {
	return h.workers.Start(ctx, 0, timeout, fn)
}

func (h *fakeHost) ReleaseAside(_ string, rel protocol.Release, _ *quorum.Round, _ time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.aside = append(h.aside, rel)
}

func (h *fakeHost) Release(context.Context, int, protocol.Cmd, string) error { return nil }

func (h *fakeHost) InLine(context.Context, int, string, string, string) (string, bool, error) {
	return "", false, nil
}

func (h *fakeHost) released() []protocol.Release {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]protocol.Release(nil), h.aside...)
}

func testConfig() Config {
	return Config{Clock: clock.Real{}, Quorum: 2, MinRetry: 10 * time.Millisecond, MaxRetry: 80 * time.Millisecond,
		MaxWait: time.Hour, Prefix: "p:", NodeTimeout: time.Second, YieldWindow: 10 * time.Millisecond,
		GraceCap: time.Second, GraceFloor: time.Millisecond, WakeIdle: time.Second,
		Proto: protocol.New(0, false, protocol.Handoff, "p:")}
}

// newStrategy returns the strategy kind with testConfig, whose Waker has no
// nodes, closed with the test.
func newStrategy(t *testing.T, kind Kind, cfg Config) (Strategy, *fakeHost) {
	h := newFakeHost(t)
	s := New(kind, cfg, h, nil)
	t.Cleanup(s.Close)
	return s, h
}

// TestRetryIn: the delay is random between MinRetry and a cap that doubles
// with each refusal up to MaxRetry, as adjust changes it; a sooner hint
// replaces it, spread by at most a quarter of itself.
func TestRetryIn(t *testing.T) {
	s, _ := newStrategy(t, Backoff, testConfig())
	w := s.Waiter(context.Background(), time.Now(), false)
	for i, cap := range []time.Duration{10, 20, 40, 80, 80} {
		d := w.RetryIn(0, nil)
		assert.GreaterOrEqual(t, d, 10*time.Millisecond, "refusal %d", i)
		assert.LessOrEqual(t, d, cap*time.Millisecond, "refusal %d", i)
	}
	assert.Equal(t, time.Minute, w.RetryIn(0, func(time.Duration) time.Duration { return time.Minute }), "adjust has the last word")
	d := w.RetryIn(4*time.Millisecond, nil)
	assert.GreaterOrEqual(t, d, 4*time.Millisecond)
	assert.LessOrEqual(t, d, 5*time.Millisecond, "the hint, spread by at most a quarter of itself")
}

// TestListenOnEnds: a wait ends with nothing at its timer, with the
// context's error (which wins over MaxWait), with ErrMaxWait, and with
// ErrClosed once the Client closes.
func TestListenOnEnds(t *testing.T) {
	cfg := testConfig()
	never := make(chan time.Time)
	s, h := newStrategy(t, Backoff, cfg)

	w := s.Waiter(context.Background(), time.Now(), false)
	_, woken, err := w.ListenOn(nil, nil, time.After(time.Millisecond), w.Start())
	assert.NoError(t, err)
	assert.False(t, woken)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cfg.MaxWait = 0
	s2, _ := newStrategy(t, Backoff, cfg)
	w = s2.Waiter(ctx, time.Now(), false)
	_, _, err = w.ListenOn(nil, nil, never, w.Start())
	assert.ErrorIs(t, err, context.Canceled, "the context's end wins over MaxWait")

	w = s2.Waiter(context.Background(), time.Now(), false)
	_, _, err = w.ListenOn(nil, nil, never, w.Start())
	assert.ErrorIs(t, err, ErrMaxWait)

	w = s2.Waiter(context.Background(), time.Now(), true)
	assert.Nil(t, w.GiveUp(), "only the context bounds the wait")

	w = s.Waiter(context.Background(), time.Now(), false)
	close(h.closing)
	_, _, err = w.ListenOn(nil, nil, never, w.Start())
	assert.ErrorIs(t, err, ErrClosed)
}

// TestRefused: what a lock's release sends to the nodes that refused its
// round: nothing where the round joined no line, the leave of its entry
// (in line), the release of what was handed off to it (handoff).
func TestRefused(t *testing.T) {
	in, _ := newStrategy(t, InLine, testConfig())
	_, ok := in.Refused("tok", protocol.Join{})
	assert.False(t, ok, "joined no line")
	rel, ok := in.Refused("tok", protocol.Join{Place: "id"})
	assert.True(t, ok)
	assert.Equal(t, protocol.Release{Token: "tok", Announce: true, Place: "id"}, rel)

	hand, _ := newStrategy(t, Handoff, testConfig())
	_, ok = hand.Refused("tok", protocol.Join{Place: "id"})
	assert.False(t, ok, "joined for no handoff")
	_, ok = hand.Refused(protocol.HandPrefix+"tok", protocol.Join{Place: "id", Channel: "ch"})
	assert.False(t, ok, "a lock handed off joined nothing")
	rel, ok = hand.Refused("tok", protocol.Join{Place: "id", Channel: "ch"})
	assert.True(t, ok)
	assert.Equal(t, protocol.Release{Token: "tok", Announce: true, Leave: true}, rel)

	back, _ := newStrategy(t, Backoff, testConfig())
	_, ok = back.Refused("tok", protocol.Join{Place: "id", Channel: "ch"})
	assert.False(t, ok, "the backoff tells the nodes nothing")
}

// handWaitOf returns the handoff part of a handoff strategy's wait for key.
func handWaitOf(t *testing.T, s Strategy, key string) (Wait, *handWait) {
	wt := s.Wait(context.Background(), []string{key}, time.Now(), false)
	iw, ok := wt.(*inLineWait)
	require.True(t, ok)
	require.NotNil(t, iw.hand)
	return wt, iw.hand
}

// TestHandWaitDelay: in line for a handoff, the timer is MaxRetry,
// doubled with each earlier round that joined, up to a quarter of the TTL.
func TestHandWaitDelay(t *testing.T) {
	s, _ := newStrategy(t, Handoff, testConfig())
	wt, _ := handWaitOf(t, s, "k")
	assert.Equal(t, 7*time.Millisecond, wt.Delay(7*time.Millisecond), "the backoff's until a round joined")
	ttl := 2 * time.Second // a quarter: 500 ms
	for i, want := range []time.Duration{80, 160, 320, 500, 500} {
		wt.Failed(Join{Token: protocol.NewToken(""), On: protocol.Join{Channel: "ch"}}, ttl, nil)
		assert.Equal(t, want*time.Millisecond, wt.Delay(time.Millisecond), "after %d rounds that joined", i+1)
	}
}

// TestHandWaitDone: a waiter that gave up in line for a handoff sends one
// release of its current round aside, which leaves the line on every node;
// one that obtained the lock sends none.
func TestHandWaitDone(t *testing.T) {
	s, h := newStrategy(t, Handoff, testConfig())
	wt, hw := handWaitOf(t, s, "k")
	first, second := protocol.NewToken(""), protocol.NewToken("")
	for _, tok := range []string{first, second} {
		wt.Failed(Join{Token: tok, On: protocol.Join{Channel: "ch"}}, time.Second, nil)
	}
	require.Equal(t, second, hw.current())
	wt.Done("")
	assert.Equal(t, []protocol.Release{{Keys: []string{"p:k"}, Token: second, Announce: true, Leave: true}}, h.released())

	s, h = newStrategy(t, Handoff, testConfig())
	wt, _ = handWaitOf(t, s, "k")
	wt.Failed(Join{Token: first, On: protocol.Join{Channel: "ch"}}, time.Second, nil)
	wt.Done(second) // the lock of a later round
	assert.Empty(t, h.released(), "a waiter that holds the lock leaves nothing aside")
}
