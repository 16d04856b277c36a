package redlock

import (
	"time"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/wake"
	"github.com/redquorum/redquorum/quorum"
)

// backoff is the WaitBackoff strategy, and the base of the others. A
// waiter's rounds tell the nodes nothing. A refused round marks the keys
// (announce.lua), so that their release is announced. The waiter retries
// after its backoff, or after a jitter once a node announces the release
// of its first key (internal/wake).
type backoff struct {
	c    *Client
	wake *wake.Waker
}

func (b *backoff) wait() waiting                             { return &backoffWait{wake: b.wake} }
func (b *backoff) refused(handover) (protocol.Release, bool) { return protocol.Release{}, false }
func (b *backoff) unlocked(*Lock)                            {}
func (b *backoff) direct(string) bool                        { return true }
func (b *backoff) waker() *wake.Waker                        { return b.wake }
func (b *backoff) close()                                    { b.wake.Close() }

// backoffWait is one Lock call's backoff.
type backoffWait struct {
	w    waiter
	wake *wake.Waker
}

func (bw *backoffWait) first() error                              { return nil }
func (bw *backoffWait) join() join                                { return join{} }
func (bw *backoffWait) failed(join, time.Duration, *quorum.Round) {}
func (bw *backoffWait) delay(d time.Duration) time.Duration       { return d }
func (bw *backoffWait) handed(time.Duration) *round               { return nil }
func (bw *backoffWait) done(*Lock)                                {}
func (bw *backoffWait) base() *waiter                             { return &bw.w }

// sleep waits for timer, or for an announcement of the key's release, and
// then for a jitter (see waiter.jitter).
func (bw *backoffWait) sleep(timer <-chan time.Time, last *Error) error {
	_, woken, err := bw.w.listen(bw.wake, timer, bw.w.start, last)
	if woken {
		bw.w.jitter()
	}
	return err
}
