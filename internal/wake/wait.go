package wake

import (
	"math/bits"
	"strings"
	"time"

	"github.com/redquorum/redquorum/internal/protocol"
)

// Wait is one wait for the release of a key. Its channel [Wait.C] is
// closed when a node announces the release, and [Wait.Close] ends the wait.
// A nil *Wait never fires. A Wait is safe for concurrent use.
type Wait struct {
	w   *Waker
	key string // as stored
	e   *entry
	// done is set by Close, guarded by w.mu.
	done bool
}

// entry is the channel of the waits for one key's release, closed when a
// node announces it, and how many are waiting.
type entry struct {
	ch chan struct{}
	n  int
	// next is the waiter the announcement named as next in line ("" for
	// none); written before ch is closed.
	next string
}

// Listen begins a wait for the release of key (as stored), subscribing to
// it if need be. It returns nil after Close, or when no node can be
// subscribed. Close the Wait when it is over.
//
// since is when the caller last stopped listening, typically while its round
// was out; zero means it always listened. If the last announcement heard came
// after since, it closes the Wait at once, and [Wait.Next] returns whom it
// named. Nobody hears a release that comes before a new subscription is in
// place. So for a since that is not zero, the Wait closes, naming nobody,
// once a majority of the nodes confirmed the key's new subscription. A
// release announces itself on every node that refused the waiter, so a waiter
// refused by a majority hears it from one of those that confirmed.
func (w *Waker) Listen(key string, since time.Time) *Wait {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || len(w.nodes) == 0 {
		return nil
	}
	_, subscribed := w.keys[key]
	if n, ok := w.named[key]; ok && subscribed && !since.IsZero() && n.at.After(since) {
		e := &entry{ch: make(chan struct{}), n: 1, next: n.next}
		close(e.ch)
		w.keys[key] = w.clock.Now()
		return &Wait{w: w, key: key, e: e}
	}
	if subscribed {
		w.keys[key] = w.clock.Now()
	} else {
		w.subscribe(key)
		if !since.IsZero() {
			w.confirming[key] = 0
		}
	}
	e := w.waiters[key]
	if e == nil {
		e = &entry{ch: make(chan struct{})}
		w.waiters[key] = e
	}
	e.n++
	return &Wait{w: w, key: key, e: e}
}

// C returns a channel that is closed when a node announces the key's
// release; nil, which never fires, for a nil Wait.
func (wt *Wait) C() <-chan struct{} {
	if wt == nil {
		return nil
	}
	return wt.e.ch
}

// Next returns the waiter that the announcement which closed C named as
// next in line for the key. It returns "" when the announcement named
// nobody, or before C is closed.
func (wt *Wait) Next() string {
	if wt == nil {
		return ""
	}
	select {
	case <-wt.e.ch:
		return wt.e.next // written before the close
	default:
		return ""
	}
}

// Close ends the wait. The key stays subscribed for the idle time from
// now. It is safe on a nil Wait and to call more than once.
func (wt *Wait) Close() {
	if wt == nil {
		return
	}
	w := wt.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt.done {
		return
	}
	wt.done = true
	if _, ok := w.keys[wt.key]; ok {
		w.keys[wt.key] = w.clock.Now()
	}
	if wt.e.n--; wt.e.n == 0 && w.waiters[wt.key] == wt.e {
		delete(w.waiters, wt.key)
	}
}

// wake closes the channel of key's waits, naming next. Callers hold w.mu.
func (w *Waker) wake(key, next string) {
	if e := w.waiters[key]; e != nil {
		e.next = next
		close(e.ch)
		delete(w.waiters, key)
	}
}

// confirmed notes that s's node confirmed the subscription of channel. If
// the channel's key is in confirming (see Listen), and a majority of the
// nodes have now confirmed it, confirmed wakes the key's waits. Callers hold
// w.mu.
func (w *Waker) confirmed(s *sub, channel string) {
	key, ok := strings.CutPrefix(channel, protocol.ReleasedChannel)
	nodes, pending := w.confirming[key]
	if !ok || !pending || s.idx >= 64 {
		return
	}
	nodes |= 1 << s.idx
	if bits.OnesCount64(nodes) <= len(w.nodes)/2 {
		w.confirming[key] = nodes
		return
	}
	delete(w.confirming, key)
	w.wake(key, "")
}

// Named returns the waiter named by the last announcement of key's release
// (as stored) that named one, and when it came. It looks among the last
// recentLimit announcements, and returns "" when none named a waiter since
// key was subscribed. A client that has just released a key hears its own
// announcement, if it waited for the key before. Its next Lock can then let
// the named waiter go first.
func (w *Waker) Named(key string) (next string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.recent[key]
	for i := len(r) - 1; i >= 0; i-- {
		if r[i].next != "" {
			return r[i].next, r[i].at
		}
	}
	return "", time.Time{}
}

// recentLimit bounds the announcements that NamedSince looks at, per key.
const recentLimit = 16

// NamedSince reports whether an announcement of key's release (as stored)
// heard after since named next. It looks among the last recentLimit
// announcements, not only the last. The nodes of one release each name the
// first of their own line, so the first announcement to arrive may name
// another waiter than a later one.
func (w *Waker) NamedSince(key, next string, since time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range w.recent[key] {
		if n.next == next && n.at.After(since) {
			return true
		}
	}
	return false
}

// Announcements returns how many announcements of key's release (as
// stored) the Waker keeps: those heard since key was subscribed, at most
// recentLimit.
func (w *Waker) Announcements(key string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.recent[key])
}

// Heard reports, without taking a lock, whether any key has an
// announcement to report through Named.
func (w *Waker) Heard() bool { return w.heard.Load() }

// Listening reports whether key (as stored) is subscribed: a wait for it
// began less than the Waker's idle time ago.
func (w *Waker) Listening(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.keys[key]
	return ok
}

// Waiting reports whether a wait for key (as stored) is under way.
func (w *Waker) Waiting(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.waiters[key] != nil
}

// Confirming reports whether a wait for key (as stored) waits for a
// majority of the nodes to confirm its new subscription (see Listen).
func (w *Waker) Confirming(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.confirming[key]
	return ok
}

// Waits returns how many keys have waits under way.
func (w *Waker) Waits() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.waiters)
}
