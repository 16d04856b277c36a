package locktest

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Attempt is one call of Lock by one client, and, when it succeeded, the
// hold that followed. Times are wall-clock UnixNano readings, so that
// histories recorded in several processes on one machine can be merged; a
// clock step during a run can produce a false report, never hide a real
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
}

// Recorder collects the attempts of the clients under test. The zero value
// is an empty recorder. It is safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	history []Attempt
}

// Start records that client is about to call Lock for key and returns the
// attempt's [Span]. Call exactly one of [Span.Failed] or [Span.Obtained]
// when Lock returns, and after Obtained, [Span.End] when the client stops
// relying on the lock.
func (r *Recorder) Start(client int, key string) *Span {
	return &Span{r: r, a: Attempt{Key: key, Client: client, Call: time.Now().UnixNano()}}
}

// Add records attempts made elsewhere, such as in another process.
func (r *Recorder) Add(attempts ...Attempt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.history = append(r.history, attempts...)
}

// History returns a copy of the attempts recorded so far: the failed ones
// and the holds that have ended.
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

// End records that the holder stops relying on the lock now, or at until
// (the lock's validity end, [redlock.Lock.Until]) if that came first. Call
// it before Unlock: a hold ends when its release starts.
//
// [redlock.Lock.Until]: https://pkg.go.dev/github.com/redquorum/redquorum/redlock#Lock.Until
func (s *Span) End(until time.Time) {
	s.a.End = max(min(time.Now().UnixNano(), until.UnixNano()), s.a.Obtained)
	s.r.Add(s.a)
}

// Overlap is two holds of one key that overlap in real time.
type Overlap struct {
	Key  string
	A, B Attempt // A obtained first
}

func (o Overlap) String() string {
	return fmt.Sprintf("key %q: hold [%d, %d] of client %d and hold [%d, %d] of client %d overlap by %v",
		o.Key, o.A.Obtained, o.A.End, o.A.Client, o.B.Obtained, o.B.End, o.B.Client,
		time.Duration(min(o.A.End, o.B.End)-o.B.Obtained))
}

// CheckOverlaps returns every pair of holds of one key where the later one
// was obtained before the earlier one ended. Each later hold is reported
// once, against the earlier hold that ends last.
func CheckOverlaps(history []Attempt) []Overlap {
	var found []Overlap
	for key, holds := range holdsByKey(history) {
		last := -1 // index of the hold seen so far that ends last
		for i, h := range holds {
			if last >= 0 && h.Obtained < holds[last].End {
				found = append(found, Overlap{Key: key, A: holds[last], B: h})
			}
			if last < 0 || h.End > holds[last].End {
				last = i
			}
		}
	}
	return found
}

// FenceRegression is a hold of a key whose fencing token is not above that
// of a hold of the key that ended before it was obtained: a store that
// checks fences would refuse its writes, and one that does not would take
// writes out of order.
type FenceRegression struct {
	Key           string
	Before, After Attempt // Before ended before After was obtained
}

func (f FenceRegression) String() string {
	return fmt.Sprintf("key %q: hold of client %d obtained at %d has fence %d, not above fence %d of client %d's hold that ended at %d",
		f.Key, f.After.Client, f.After.Obtained, f.After.Fence, f.Before.Fence, f.Before.Client, f.Before.End)
}

// CheckFences returns every hold with a fencing token that is not above the
// highest token of the holds of its key that ended before it was obtained.
// Holds without a token (0) are left out.
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
