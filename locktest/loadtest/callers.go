package loadtest

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"
)

// keyRing is the number of distinct keys each caller cycles through.
const keyRing = 512

// run drives the callers for d, caller w through lockers[w], and gathers
// their samples.
func run(ctx context.Context, lockers []Locker, sc Scenario, prefix string, d time.Duration) Result {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	deadline := start.Add(d)
	callers := make([]caller, sc.Callers)
	var wg sync.WaitGroup
	for w := range callers {
		wg.Go(func() { callers[w] = callerLoop(ctx, lockers[w], sc, callerKeys(sc, prefix, w), deadline) })
	}
	wg.Wait()
	return gather(callers, sc, time.Since(start))
}

// callerKeys returns the keys caller w locks, in turn or at random.
func callerKeys(sc Scenario, prefix string, w int) []string {
	n := keyRing
	if sc.HotKey {
		n = 1
	}
	if sc.Shared > 0 {
		n = sc.Shared
	}
	keys := make([]string, n)
	for i := range n {
		keys[i] = prefix + strconv.Itoa(w) + ":" + strconv.Itoa(i)
		if sc.Shared > 0 {
			keys[i] = prefix + "shared:" + strconv.Itoa(i)
		}
		if sc.HotKey {
			keys[i] = prefix + "hot"
		}
	}
	return keys
}

// caller is what one caller measured.
type caller struct {
	Samples []time.Duration `json:"samples_ns"`
	Holds   []Hold          `json:"holds,omitempty"` // hot key only
	Errors  int             `json:"errors"`
	First   string          `json:"first_error,omitempty"`
}

// Hold is one hold of a hot key: when Lock returned it, and when Unlock was
// called. Both are wall-clock Unix nanoseconds, which separate processes on
// one machine share.
type Hold struct {
	Obtained int64 `json:"obtained"`
	Released int64 `json:"released"`
}

// callerLoop locks keys through l until deadline.
func callerLoop(ctx context.Context, l Locker, sc Scenario, keys []string, deadline time.Time) caller {
	c := caller{Samples: make([]time.Duration, 0, 4096)}
	var first error
	for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		t0 := time.Now()
		lctx, lcancel := context.WithDeadline(ctx, deadline.Add(10*time.Second))
		k := keys[i%len(keys)]
		if sc.Shared > 0 {
			k = keys[rand.IntN(len(keys))]
		}
		held, err := l.Lock(lctx, k, sc.TTL)
		lcancel()
		var h Hold
		if err == nil && (sc.HotKey || sc.Shared > 0) {
			h.Obtained = time.Now().UnixNano()
			c.Samples = append(c.Samples, time.Since(t0))
			holdFor(sc)
		}
		if err == nil {
			h.Released = time.Now().UnixNano()
			err = held.Unlock(ctx)
			if err == nil && !sc.HotKey && sc.Shared == 0 {
				c.Samples = append(c.Samples, time.Since(t0))
			}
			if sc.HotKey && h.Obtained < deadline.UnixNano() {
				// Only holds that began in the measured time: after it,
				// the holders stop locking, and the waiters left (redsync's
				// in their backoff) come in one by one.
				c.Holds = append(c.Holds, h)
			}
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			c.Errors++
			if first == nil {
				first = err
				c.First = err.Error()
			}
		}
	}
	return c
}
