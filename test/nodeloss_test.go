package test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/internal/testkit/redisproc"
	"github.com/redquorum/redquorum/redlock"
)

// TestHotKeyNodeLoss: four Clients, as four app servers, and forty callers
// take one hot key with the default waiting (handoffs on the nodes),
// holding it 2 ms each; one node of five is killed (SIGKILL) after ten
// acquisitions. Every caller's retry timer and the lock's TTL are a
// minute, so a caller obtains the key only from handoffs and
// announcements: one that a node's loss leaves without them runs out its
// 30 s context and fails the test (as every caller does when unlocks
// announce nothing). Five runs, each on new servers. The split handoffs
// that stalled waiters after a node's loss need later rounds sent by
// timers, which this test has none of: TestHandoffHeardDuringRound and
// TestHandoffCleanUpNames (redlock) check those causes one by one.
func TestHotKeyNodeLoss(t *testing.T) {
	redisproc.Require(t)
	for run := range 5 {
		t.Run(fmt.Sprint(run), func(t *testing.T) { hotKeyNodeLoss(t, run%5) })
	}
}

func hotKeyNodeLoss(t *testing.T, killed int) {
	s, err := redisproc.Start(t.Context(), 5)
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	clients := make([]*redlock.Client, 4)
	for i := range clients {
		clients[i] = open(t, s.Addrs, &redlock.Options{MinRetryDelay: time.Minute, MaxRetryDelay: time.Minute})
	}
	var (
		wg       sync.WaitGroup
		obtained atomic.Int64
		kill     sync.Once
		errs     = make(chan error, 40)
	)
	for b := range 40 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l, err := clients[b%len(clients)].Lock(ctx, "stock", time.Minute)
			if err != nil {
				errs <- fmt.Errorf("caller %d: %w", b, err)
				return
			}
			if obtained.Add(1) == 10 {
				kill.Do(func() { s.Kill(killed) })
			}
			time.Sleep(2 * time.Millisecond)
			if err := l.Unlock(ctx); err != nil {
				errs <- fmt.Errorf("caller %d: unlock: %w", b, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.EqualValues(t, 40, obtained.Load(), "every caller obtained the key")
}
