package waiting

import (
	"context"
	"time"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/wake"
	"github.com/redquorum/redquorum/quorum"
)

// backoff is the Backoff strategy, and the base of the others. A waiter's
// rounds tell the nodes nothing. A refused round marks the keys
// (announce.lua), so that their release is announced. The waiter retries
// after its backoff, or after a jitter once a node announces the release
// of its first key (internal/wake).
type backoff struct {
	cfg  Config
	host Host
	wake *wake.Waker
}

// stored returns key as stored on the nodes.
func (b *backoff) stored(key string) string { return b.cfg.Prefix + key }

func (b *backoff) Wait(ctx context.Context, keys []string, began time.Time, ctxOnly bool) Wait {
	bw := &backoffWait{}
	bw.w.init(b, ctx, keys, began, ctxOnly)
	return bw
}

func (b *backoff) Waiter(ctx context.Context, began time.Time, ctxOnly bool) Waiter {
	var w Waiter
	w.init(b, ctx, nil, began, ctxOnly)
	return w
}

func (b *backoff) Refused(string, protocol.Join) (protocol.Release, bool) {
	return protocol.Release{}, false
}
func (b *backoff) Unlocked(string)    {}
func (b *backoff) Direct(string) bool { return true }
func (b *backoff) Waker() *wake.Waker { return b.wake }
func (b *backoff) Close()             { b.wake.Close() }

// backoffWait is one lock call's backoff.
type backoffWait struct {
	w Waiter
}

func (bw *backoffWait) Waiter() *Waiter                           { return &bw.w }
func (bw *backoffWait) First() error                              { return nil }
func (bw *backoffWait) Join() Join                                { return Join{} }
func (bw *backoffWait) Failed(Join, time.Duration, *quorum.Round) {}
func (bw *backoffWait) Delay(d time.Duration) time.Duration       { return d }
func (bw *backoffWait) Handed(time.Duration) (Hand, bool)         { return Hand{}, false }
func (bw *backoffWait) Done(string)                               {}

// Sleep waits for timer, or for an announcement of the key's release, and
// then for a jitter (see Waiter.Jitter).
func (bw *backoffWait) Sleep(timer <-chan time.Time) error {
	_, woken, err := bw.w.listen(bw.w.b.wake, timer, bw.w.start)
	if woken {
		bw.w.Jitter()
	}
	return err
}
