package locktest

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Attempt is one call of Lock by one client, and, when it succeeded, the
// hold that followed. Times are wall-clock UnixNano readings, so that
// histories recorded in several processes on one machine can be merged. A
// clock step during a run can produce a false report. It never hides a real
// overlap longer than the step.
//
// Attempt is encoded as JSON between processes: add fields, never rename or
// retype one.
type Attempt struct {
	Key    string
	Client int   // who called Lock: any number that tells the callers apart
	Call   int64 // Lock called
	// Obtained is when Lock returned the lock; for a failed attempt, when it
	// returned the error.
	Obtained int64
	OK       bool
	// End is when the holder stopped relying on the lock: the earlier of
	// the start of Unlock and the lock's validity end. Unused for a failure.
	End int64
	// Fence is the lock's fencing token, 0 without fencing.
	Fence uint64 `json:",omitempty"`
	// Shared marks a read hold of a read-write lock: two shared holds of
	// a key may overlap, a shared and an exclusive one may not.
	Shared bool `json:",omitempty"`
}

// Recorder collects the attempts of the clients under test. The zero value
// is an empty recorder. It is safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	history []Attempt
}

// Start records that client is about to call Lock for key, and returns the
// attempt's [Span]. When Lock returns, call exactly one of [Span.Failed] or
// [Span.Obtained]. After Obtained, call [Span.End] when the client stops
// relying on the lock.
func (r *Recorder) Start(client int, key string) *Span {
	return &Span{r: r, a: Attempt{Key: key, Client: client, Call: time.Now().UnixNano()}}
}

// StartShared is [Recorder.Start] for a read lock of a read-write lock. It
// records the attempt as Shared.
func (r *Recorder) StartShared(client int, key string) *Span {
	s := r.Start(client, key)
	s.a.Shared = true
	return s
}

// Add records attempts made elsewhere, such as in another process.
func (r *Recorder) Add(attempts ...Attempt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.history = append(r.history, attempts...)
}

// History returns a copy of the attempts recorded so far. These are the
// failed ones and the holds that have ended.
func (r *Recorder) History() []Attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.history)
}

// Span is one attempt being recorded. It is used by one goroutine.
type Span struct {
	r *Recorder
	a Attempt
}

// Failed records that Lock returned an error.
func (s *Span) Failed() {
	s.a.Obtained = time.Now().UnixNano()
	s.r.Add(s.a)
}

// Obtained marks that Lock returned the lock, with its fencing token (0
// without fencing). The hold is recorded by [Span.End].
func (s *Span) Obtained(fence uint64) {
	s.a.Obtained, s.a.OK, s.a.Fence = time.Now().UnixNano(), true, fence
}

// End records that the holder stops relying on the lock now. If until came
// first, the hold ends at until, the lock's validity end
// ([redlock.Lock.Until]). Call End before Unlock: a hold ends when its
// release starts.
//
// [redlock.Lock.Until]: https://pkg.go.dev/github.com/redquorum/redquorum/redlock#Lock.Until
func (s *Span) End(until time.Time) {
	s.a.End = max(min(time.Now().UnixNano(), until.UnixNano()), s.a.Obtained)
	s.r.Add(s.a)
}

// Overlap is two holds of one key that overlap in real time, at least one
// of them exclusive.
type Overlap struct {
	Key  string
	A, B Attempt // A obtained first
}

func (o Overlap) String() string {
	return fmt.Sprintf("key %q: hold [%d, %d] of client %d%s and hold [%d, %d] of client %d%s overlap by %v",
		o.Key, o.A.Obtained, o.A.End, o.A.Client, mode(o.A), o.B.Obtained, o.B.End, o.B.Client, mode(o.B),
		time.Duration(min(o.A.End, o.B.End)-o.B.Obtained))
}

// mode names a shared hold in a violation's text, and says nothing of an
// exclusive one.
func mode(a Attempt) string {
	if a.Shared {
		return " (shared)"
	}
	return ""
}

// CheckOverlaps returns every pair of holds of one key where the later one
// was obtained before the earlier one ended, unless both are Shared. No
// writer may overlap anyone, and readers may overlap each other. A hold that
// ends when another is obtained does not overlap it. Each later hold is
// reported once, against the conflicting earlier hold that ends last.
func CheckOverlaps(history []Attempt) []Overlap {
	var found []Overlap
	for key, holds := range holdsByKey(history) {
		sweep(holds, func(active []Attempt, h Attempt) {
			var last *Attempt // the conflicting hold that ends last
			for i, a := range active[:len(active)-1] {
				if (!a.Shared || !h.Shared) && (last == nil || a.End > last.End) {
					last = &active[i]
				}
			}
			if last != nil {
				found = append(found, Overlap{Key: key, A: *last, B: h})
			}
		})
	}
	return found
}

// Crowd is a hold obtained while Limit or more holds of its key were inside
// their validity. That is more holders at once than a semaphore of Limit
// permits admits.
type Crowd struct {
	Key   string
	Limit int
	Holds []Attempt // the holds inside their validity when the last one was obtained
}

// Excess is how many holders the crowd had beyond its limit.
func (c Crowd) Excess() int { return len(c.Holds) - c.Limit }

func (c Crowd) String() string {
	last := c.Holds[len(c.Holds)-1]
	clients := make([]string, len(c.Holds))
	for i, a := range c.Holds {
		clients[i] = fmt.Sprint(a.Client)
	}
	return fmt.Sprintf("key %q: %d holders at once, limit %d, when client %d obtained at %d (clients %s)",
		c.Key, len(c.Holds), c.Limit, last.Client, last.Obtained, strings.Join(clients, ", "))
}

// CheckLimit returns every hold obtained while k or more holds of its key
// were inside their validity. These are the violations of a semaphore of k
// permits. A hold that ends when another is obtained is no longer inside
// its validity. Shared is ignored: every hold counts. For k = 1 CheckLimit
// reports the same later holds as [CheckOverlaps] on a history without
// shared holds.
func CheckLimit(history []Attempt, k int) []Crowd {
	var found []Crowd
	for key, holds := range holdsByKey(history) {
		sweep(holds, func(active []Attempt, _ Attempt) {
			if len(active) > k {
				found = append(found, Crowd{Key: key, Limit: k, Holds: slices.Clone(active)})
			}
		})
	}
	return found
}

// sweep calls visit for each of holds, which are sorted by Obtained. It
// passes the holds inside their validity when that one was obtained. These
// are the holds obtained before it that end after its Obtained, then itself.
func sweep(holds []Attempt, visit func(active []Attempt, h Attempt)) {
	var active []Attempt
	for _, h := range holds {
		active = slices.DeleteFunc(active, func(a Attempt) bool { return a.End <= h.Obtained })
		active = append(active, h)
		visit(active, h)
	}
}

// FenceRegression is a hold whose fencing token is not above that of an
// earlier hold of its key, one that ended before it was obtained. A store
// that checks fences would refuse its writes. A store that does not would
// take writes out of order.
type FenceRegression struct {
	Key           string
	Before, After Attempt // Before ended before After was obtained
}

func (f FenceRegression) String() string {
	return fmt.Sprintf("key %q: hold of client %d obtained at %d has fence %d, not above fence %d of client %d's hold that ended at %d",
		f.Key, f.After.Client, f.After.Obtained, f.After.Fence, f.Before.Fence, f.Before.Client, f.Before.End)
}

// CheckFences returns every hold whose fencing token is not above the
// highest token of the earlier holds of its key. An earlier hold is one
// that ended before this one was obtained. Holds without a token (0) are
// left out.
func CheckFences(history []Attempt) []FenceRegression {
	var found []FenceRegression
	for key, holds := range holdsByKey(history) {
		byEnd := slices.Clone(holds)
		slices.SortFunc(byEnd, func(a, b Attempt) int { return cmp.Compare(a.End, b.End) })
		var top Attempt // the ended hold with the highest fence so far
		j := 0
		for _, h := range holds {
			if h.Fence == 0 {
				continue
			}
			for ; j < len(byEnd) && byEnd[j].End < h.Obtained; j++ {
				if byEnd[j].Fence > top.Fence {
					top = byEnd[j]
				}
			}
			if top.Fence != 0 && h.Fence <= top.Fence {
				found = append(found, FenceRegression{Key: key, Before: top, After: h})
			}
		}
	}
	return found
}

// holdsByKey returns the successful attempts of history by key, each list
// sorted by Obtained.
func holdsByKey(history []Attempt) map[string][]Attempt {
	byKey := map[string][]Attempt{}
	for _, a := range history {
		if a.OK {
			byKey[a.Key] = append(byKey[a.Key], a)
		}
	}
	for _, holds := range byKey {
		slices.SortFunc(holds, func(a, b Attempt) int { return cmp.Compare(a.Obtained, b.Obtained) })
	}
	return byKey
}
