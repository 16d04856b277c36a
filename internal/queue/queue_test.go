package queue

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
)

// start is where the fake clocks of these tests begin.
var start = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// bound is how long a test waits for something that a correct queue does at
// once: only a broken queue ever reaches it.
const bound = 5 * time.Second

// never is a give-up channel that never fires.
func never() <-chan time.Time { return nil }

// newQueue returns a queue on a fake clock, closed when the test ends so that
// a waiter that a failed assertion left behind returns before leakcheck looks.
func newQueue(t *testing.T) (*Queue[handover], *clock.Fake) {
	t.Helper()
	f := clock.NewFake(start)
	q := New[handover](f)
	t.Cleanup(q.Close)
	return q, f
}

// handover stands for the lock that redlock hands over with a turn.
type handover struct {
	Token string
	TTL   time.Duration
}

// result is what one Wait returned.
type result struct {
	turn *Turn[handover]
	h    handover
	err  error
}

// enqueue starts a Wait for key in a goroutine and returns once the caller
// waits in the queue, so that callers started one after another arrive in
// that order. The goroutine ends when Wait returns.
func enqueue(t *testing.T, q *Queue[handover], ctx context.Context, key string, giveUp func() <-chan time.Time) <-chan result {
	t.Helper()
	n := q.Waiting(key)
	res := make(chan result, 1)
	go func() {
		turn, h, err := q.Wait(ctx, key, giveUp)
		res <- result{turn, h, err}
	}()
	require.Eventually(t, func() bool { return q.Waiting(key) == n+1 }, bound, time.Millisecond, "caller not queued for %q", key)
	return res
}

// recv returns the result of a Wait that must end.
func recv(t *testing.T, res <-chan result) result {
	t.Helper()
	select {
	case r := <-res:
		return r
	case <-time.After(bound):
		t.Fatal("Wait did not return")
		return result{}
	}
}

// pending asserts that a Wait has not returned. The tests call it when
// nothing can end that Wait any more but a bug in the queue.
func pending(t *testing.T, res <-chan result, msgAndArgs ...any) {
	t.Helper()
	select {
	case r := <-res:
		assert.Fail(t, fmt.Sprintf("Wait returned early: %+v", r), msgAndArgs...)
	default:
	}
}

// TestFirstCallerAtOnce: a caller with nobody ahead of it gets its turn
// without waiting and without a handover, for each key on its own, and its
// Leave removes the key.
func TestFirstCallerAtOnce(t *testing.T) {
	q, _ := newQueue(t)
	a, h, err := q.Wait(t.Context(), "a", never)
	require.NoError(t, err)
	require.NotNil(t, a)
	assert.Zero(t, h)
	b, _, err := q.Wait(t.Context(), "b", never)
	require.NoError(t, err, "another key does not wait behind a")
	require.NotNil(t, b)
	assert.Equal(t, 2, q.Keys())
	assert.Zero(t, q.Waiting("a"))

	q.Leave(a)
	assert.Equal(t, 1, q.Keys())
	q.Leave(b)
	assert.Zero(t, q.Keys())
	q.Leave(nil) // ignored
	assert.False(t, q.HandOver(nil, handover{Token: "t"}))
}

// TestTryJoin: TryJoin gives the turn of a key that nobody of the client
// contends for, as Wait does, and nil, without joining, while another
// caller owns the key's turn; a later Wait queues behind the turn it gave.
func TestTryJoin(t *testing.T) {
	leakcheck.Check(t)
	q, _ := newQueue(t)
	a := q.TryJoin("k")
	require.NotNil(t, a)
	assert.Nil(t, q.TryJoin("k"), "the key's turn is owned")
	assert.Zero(t, q.Waiting("k"), "a TryJoin that got nothing did not join")
	b := q.TryJoin("other")
	require.NotNil(t, b, "another key is free")
	w := enqueue(t, q, t.Context(), "k", never)
	pending(t, w, "waits behind the turn TryJoin gave")
	q.Leave(a)
	r := recv(t, w)
	require.NoError(t, r.err)
	assert.Nil(t, q.TryJoin("k"), "the waiter owns the turn now")
	q.Leave(r.turn)
	q.Leave(b)
	assert.Zero(t, q.Keys())
	c := q.TryJoin("k")
	require.NotNil(t, c, "free again")
	q.Leave(c)
}

// TestLeavePassesInArrivalOrder: while the owner keeps its turn the callers
// behind it wait; each Leave by the owner hands the turn to the waiter that
// arrived first, without a lock, and the last Leave removes the key.
func TestLeavePassesInArrivalOrder(t *testing.T) {
	leakcheck.Check(t)
	q, _ := newQueue(t)
	owner, _, err := q.Wait(t.Context(), "k", never)
	require.NoError(t, err)
	var waiters []<-chan result
	for range 3 {
		waiters = append(waiters, enqueue(t, q, t.Context(), "k", never))
	}
	for _, w := range waiters {
		pending(t, w, "waits while the owner keeps its turn")
	}

	cur := owner
	for i, w := range waiters {
		q.Leave(cur)
		r := recv(t, w)
		require.NoError(t, r.err, "waiter %d", i)
		require.NotNil(t, r.turn, "waiter %d", i)
		assert.NotSame(t, cur, r.turn)
		assert.Zero(t, r.h, "Leave hands over no lock")
		assert.Equal(t, len(waiters)-1-i, q.Waiting("k"))
		for _, later := range waiters[i+1:] {
			pending(t, later, "waiter %d's turn went to a later caller", i)
		}
		q.Leave(cur) // the previous owner's second Leave changes nothing
		assert.Equal(t, len(waiters)-1-i, q.Waiting("k"))
		cur = r.turn
	}
	assert.Equal(t, 1, q.Keys())
	q.Leave(cur)
	assert.Zero(t, q.Keys())
}

// TestWaiterGivesUp: a waiter whose context ends, whose give-up channel
// fires, or whose queue is closed returns the reason without a turn and
// leaves the queue; a waiter behind it keeps its place and is next (except
// after Close, which ends every wait).
func TestWaiterGivesUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(cancel context.CancelFunc, f *clock.Fake, q *Queue[handover])
		want error
	}{
		{"context cancelled", func(cancel context.CancelFunc, _ *clock.Fake, _ *Queue[handover]) { cancel() }, context.Canceled},
		{"give-up channel fires", func(_ context.CancelFunc, f *clock.Fake, _ *Queue[handover]) { f.Advance(time.Minute) }, ErrGaveUp},
		{"queue closed", func(_ context.CancelFunc, _ *clock.Fake, q *Queue[handover]) { q.Close() }, ErrClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			q, f := newQueue(t)
			owner, _, err := q.Wait(t.Context(), "k", never)
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			deadline := f.After(time.Minute)
			first := enqueue(t, q, ctx, "k", func() <-chan time.Time { return deadline })
			second := enqueue(t, q, t.Context(), "k", never)
			pending(t, first)

			tc.end(cancel, f, q)
			r := recv(t, first)
			require.ErrorIs(t, r.err, tc.want)
			assert.Nil(t, r.turn)
			assert.Zero(t, r.h)
			if tc.want == ErrClosed {
				r = recv(t, second)
				require.ErrorIs(t, r.err, ErrClosed, "Close ends every wait")
				assert.Nil(t, r.turn)
				assert.Zero(t, q.Waiting("k"))
				_, _, err := q.Wait(t.Context(), "k", never)
				require.ErrorIs(t, err, ErrClosed, "a caller that would wait after Close")
				q.Close() // a second Close is harmless
			} else {
				assert.Equal(t, 1, q.Waiting("k"), "the waiter left the queue")
				pending(t, second)
				q.Leave(owner)
				r = recv(t, second)
				require.NoError(t, r.err, "the turn skips the waiter that left")
				owner = r.turn
			}
			assert.Zero(t, q.Waiting("k"))
			q.Leave(owner)
			assert.Zero(t, q.Keys())
		})
	}
}

// TestHolderExpires: an owner that holds its lock and never unlocks keeps
// its turn until the lock's validity ends, and the waiter takes the turn
// over at that moment, not before; an Extend (Held again, later) before
// then moves that moment. The owner that lost its turn can neither pass it
// on nor hand its lock over.
func TestHolderExpires(t *testing.T) {
	for _, tc := range []struct {
		name    string
		extends []time.Duration // Held again until start plus each, before the first expiry
	}{
		{"held", nil},
		{"extended", []time.Duration{3 * time.Second}},
		{"extended twice", []time.Duration{2 * time.Second, 4 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leakcheck.Check(t)
			q, f := newQueue(t)
			owner, _, err := q.Wait(t.Context(), "k", never)
			require.NoError(t, err)
			res := enqueue(t, q, t.Context(), "k", never)
			q.Held(owner, start.Add(time.Second))
			blockedFor := func(d time.Duration) func() bool { return func() bool { return f.WaitingFor(d) } }
			require.Eventually(t, blockedFor(time.Second), bound, time.Millisecond, "waiter not watching the expiry")
			expiry := time.Second
			for _, d := range tc.extends {
				expiry = d
				q.Held(owner, start.Add(d))
			}
			require.Eventually(t, blockedFor(expiry), bound, time.Millisecond, "waiter not watching the new expiry")

			f.Advance(expiry - time.Nanosecond)
			pending(t, res, "taken over before the lock's validity ended")
			assert.Equal(t, 1, q.Waiting("k"))
			f.Advance(time.Nanosecond)
			r := recv(t, res)
			require.NoError(t, r.err)
			require.NotNil(t, r.turn)
			assert.Zero(t, r.h, "an expired lock is not handed over")
			assert.Zero(t, q.Waiting("k"))

			next := enqueue(t, q, t.Context(), "k", never)
			assert.False(t, q.HandOver(owner, handover{Token: "old"}), "HandOver by the owner that lost its turn")
			q.Leave(owner) // does nothing: the turn is no longer owner's
			assert.Equal(t, 1, q.Waiting("k"))
			pending(t, next)
			q.Leave(r.turn)
			r = recv(t, next)
			require.NoError(t, r.err)
			q.Leave(r.turn)
			assert.Zero(t, q.Keys())
		})
	}
}

// TestHandOver: HandOver passes the turn and the lock to the first waiter; it
// refuses without a waiter (the owner keeps its turn), and after MaxHandovers
// handovers in a row it refuses once, so that the owner releases the lock
// and Leaves, and then counts again from zero.
func TestHandOver(t *testing.T) {
	leakcheck.Check(t)
	q, _ := newQueue(t)
	owner, _, err := q.Wait(t.Context(), "k", never)
	require.NoError(t, err)
	assert.False(t, q.HandOver(owner, handover{Token: "t", TTL: time.Second}), "no waiter")
	assert.Equal(t, 1, q.Keys(), "the owner keeps its turn")

	var want []bool // what each HandOver in a row returns
	for range 2 {
		for range MaxHandovers {
			want = append(want, true)
		}
		want = append(want, false)
	}
	want = append(want, true)
	cur := owner
	for i, ok := range want {
		res := enqueue(t, q, t.Context(), "k", never)
		h := handover{Token: fmt.Sprintf("token-%d", i), TTL: time.Duration(i+1) * time.Second}
		require.Equal(t, ok, q.HandOver(cur, h), "HandOver %d", i)
		if !ok {
			pending(t, res, "HandOver %d refused, yet the waiter got the turn", i)
			q.Leave(cur) // the owner releases the lock on the nodes, then leaves
			h = handover{}
		}
		r := recv(t, res)
		require.NoError(t, r.err)
		require.NotNil(t, r.turn)
		assert.Equal(t, h, r.h, "HandOver %d", i)
		assert.False(t, q.HandOver(cur, h), "HandOver %d: the previous owner's second HandOver", i)
		cur = r.turn
	}
	q.Leave(cur)
	assert.Zero(t, q.Keys())
}

// pausing returns a give-up function that blocks the caller at its call
// number at until proceed is closed, having closed entered: it stands for
// the scheduler pausing a waiter just before its select. Every earlier call
// is let through, having closed first (the waiter watches the queue from
// then on).
func pausing(at int) (giveUp func() <-chan time.Time, first, entered, proceed chan struct{}) {
	first, entered, proceed = make(chan struct{}), make(chan struct{}), make(chan struct{})
	calls := 0
	return func() <-chan time.Time {
		calls++
		if calls == 1 && at > 1 {
			close(first)
		}
		if calls == at {
			close(entered)
			<-proceed
		}
		return nil
	}, first, entered, proceed
}

// TestHandoverNotLostWhenWaiterGivesUp: a lock handed over to a waiter whose
// context ends at the same moment is not dropped. Either the waiter takes
// it, or it goes on to the next waiter, or, with nobody left, Wait returns
// it with the error for the caller to release. Without this the handed-over
// keys stayed on the nodes, held by nobody, until their TTL.
func TestHandoverNotLostWhenWaiterGivesUp(t *testing.T) {
	leakcheck.Check(t)
	h := handover{Token: "tok", TTL: time.Minute}
	for _, behind := range []bool{true, false} {
		for trial := range 50 {
			q, _ := newQueue(t)
			owner, _, err := q.Wait(t.Context(), "k", never)
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(t.Context())
			giveUp, watching, entered, proceed := pausing(2)
			first := enqueue(t, q, ctx, "k", giveUp)
			<-watching                            // the waiter is in its first select
			q.Held(owner, start.Add(time.Minute)) // wakes the waiter into its second select
			<-entered
			var second <-chan result
			if behind {
				second = enqueue(t, q, t.Context(), "k", never)
			}
			cancel()
			require.True(t, q.HandOver(owner, h))
			close(proceed)
			r := recv(t, first)
			switch {
			case r.err == nil:
				assert.Equal(t, h, r.h, "trial %d: the waiter took its turn", trial)
				q.Leave(r.turn)
			case behind:
				assert.Equal(t, handover{}, r.h, "trial %d", trial)
				r2 := recv(t, second)
				require.NoError(t, r2.err)
				assert.Equal(t, h, r2.h, "trial %d: the lock went on to the next waiter", trial)
				q.Leave(r2.turn)
			default:
				assert.Equal(t, h, r.h, "trial %d: returned with the error, for the caller to release", trial)
			}
			if behind && r.err == nil {
				q.Leave(recv(t, second).turn)
			}
			assert.Zero(t, q.Keys(), "trial %d", trial)
		}
	}
}

// TestExpiredTurnPassesToFirstWaiter: when the owner's lock expires, the
// first waiter takes the turn over even if a later waiter notices the
// expiry first.
func TestExpiredTurnPassesToFirstWaiter(t *testing.T) {
	leakcheck.Check(t)
	q, f := newQueue(t)
	owner, _, err := q.Wait(t.Context(), "k", never)
	require.NoError(t, err)
	q.Held(owner, start.Add(time.Second))
	giveUp, _, entered, proceed := pausing(1)
	first := make(chan result, 1)
	go func() {
		turn, h, err := q.Wait(t.Context(), "k", giveUp)
		first <- result{turn, h, err}
	}()
	<-entered // the first waiter has joined and is about to watch the expiry
	second := enqueue(t, q, t.Context(), "k", never)
	require.Eventually(t, func() bool { return f.Waiters() >= 1 }, bound, time.Millisecond)
	f.Advance(time.Second)
	time.Sleep(20 * time.Millisecond) // time for the second waiter to jump the queue, were it to
	pending(t, second, "the second waiter jumped the queue")
	close(proceed)
	r := recv(t, first)
	require.NoError(t, r.err)
	q.Leave(owner) // no effect: the turn was taken over
	q.Leave(r.turn)
	r2 := recv(t, second)
	require.NoError(t, r2.err)
	q.Leave(r2.turn)
}
