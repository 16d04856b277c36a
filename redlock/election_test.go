package redlock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/testkit/leakcheck"
	"github.com/redquorum/redquorum/internal/testkit/redisproc"
)

// electionNodes starts n redis-server processes and returns a function
// that opens a Client on them with owner (fencing on when opts is nil),
// closed at the end of the test. Its Options.NodeTimeout is 2s unless
// opts sets it: the nodes answer in microseconds, but the race detector on
// a loaded machine can stall a call for tens of milliseconds, and these
// tests are not about slow nodes.
func electionNodes(t *testing.T, n int) (*redisproc.Servers, func(owner string, opts *Options) *Client) {
	s := redisproc.StartT(t, n)
	return s, func(owner string, opts *Options) *Client {
		if opts == nil {
			opts = &Options{Fencing: true}
		}
		if opts.NodeTimeout == 0 {
			opts.NodeTimeout = 2 * time.Second
		}
		opts.Owner = owner
		c, err := Open(s.Addrs, opts)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
}

// lockRounds passes on the rounds of each Lock call that obtained its
// lock, of a Client whose Observer it is.
type lockRounds struct{ ch chan []Round }

func (r *lockRounds) observer() *Observer {
	r.ch = make(chan []Round, 16)
	return &Observer{End: func(_ context.Context, e Event) {
		if e.Op == OpLock && e.Outcome == Obtained {
			r.ch <- e.Rounds
		}
	}}
}

// after returns the rounds in rs that started after t.
func after(rs []Round, t time.Time) []Round {
	var out []Round
	for _, r := range rs {
		if r.Start.After(t) {
			out = append(out, r)
		}
	}
	return out
}

// stalled is the real clock, but its timers of a second or more never
// fire: a Client on it retries a Lock only when an announcement wakes it.
type stalled struct{ clock.Real }

func (stalled) After(d time.Duration) <-chan time.Time {
	if d >= time.Second {
		return nil
	}
	return time.After(d)
}

// TestElectionHandover: terms increase from leader to leader, Leader shows
// the leader's value, term and owner, and a resign hands the election to
// the waiting candidate on the release's announcements alone, not after
// its retry delay or the TTL: the candidate's timers never fire.
//
// Each node announces its own release, and the first announcement wakes
// the candidate while the release may still be on its way to the other
// nodes: its round can reach some of them first and find the key taken,
// and the next announcement wakes it again. So the candidate's rounds
// after the resign are one or more, each woken by an announcement, and
// all but the last were refused by nodes that still held the old lock.
func TestElectionHandover(t *testing.T) {
	leakcheck.Check(t)
	s, open := electionNodes(t, 5)
	var rounds lockRounds
	a := open("a", nil)
	b := open("b", &Options{Fencing: true, Observer: rounds.observer(), Clock: stalled{},
		MinRetryDelay: 10 * time.Second, MaxRetryDelay: 10 * time.Second})
	ctx := t.Context()
	const ttl = 30 * time.Second

	_, err := a.Election("sched").Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader)
	assert.EqualError(t, err, `redlock: leader "sched": no leader (0 of 5 nodes, 3 needed)`)

	la, err := a.Election("sched").Campaign(ctx, "a:1", ttl)
	require.NoError(t, err)
	info, err := b.Election("sched").Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, LeaderInfo{Value: "a:1", Term: la.Term(), Owner: "a", TTL: info.TTL}, info)
	assert.Greater(t, info.TTL, ttl/2)
	assert.NotZero(t, la.Term())

	got := make(chan *Leadership, 1)
	go func() {
		lb, err := b.Election("sched").Campaign(ctx, "b:1", ttl)
		assert.NoError(t, err)
		got <- lb
	}()
	waitLine(t, s, b, "sched")
	select {
	case <-got:
		t.Fatal("b leads while a does")
	default:
	}
	resigned := time.Now()
	require.NoError(t, la.Resign(ctx))
	var lb *Leadership
	select {
	case lb = <-got:
	case <-time.After(time.Minute):
		t.Fatal("b still waits: the release's announcements did not wake it, and its timers never fire")
	}
	require.NotNil(t, lb)
	woken := after(<-rounds.ch, resigned)
	require.NotEmpty(t, woken, "b's rounds after the resign")
	for i, r := range woken[:len(woken)-1] {
		taken := 0
		for _, v := range r.Nodes {
			if v.Outcome == VoteTaken {
				taken++
			}
		}
		assert.Positive(t, taken, "b's round %d of %d after the resign failed, but no node held the old lock: %+v", i+1, len(woken), r)
	}
	assert.Greater(t, lb.Term(), la.Term(), "terms are fences")

	select {
	case <-la.Done():
	default:
		t.Fatal("a's Done is open after Resign")
	}
	assert.ErrorIs(t, context.Cause(la.Context()), ErrResigned)
	assert.ErrorIs(t, la.Resign(ctx), ErrNotHeld, "a second Resign")
	assert.ErrorIs(t, la.Proclaim(ctx, "a:2"), ErrNotHeld)

	info, err = a.Election("sched").Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "b:1", info.Value)
	assert.Equal(t, lb.Term(), info.Term)
	assert.Equal(t, "b", info.Owner)

	require.NoError(t, lb.Proclaim(ctx, "b:2"))
	info, err = a.Election("sched").Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "b:2", info.Value)
	assert.Equal(t, lb.Term(), info.Term, "Proclaim keeps the term")

	require.NoError(t, lb.Resign(ctx))
	_, err = a.Election("sched").Leader(ctx)
	require.ErrorIs(t, err, ErrNoLeader)
}

// waitLine waits until candidate c has found the election's lock key held
// on a majority of the nodes of s, which marks the key there so that the
// release announces itself, and listens for the announcement: its round
// has come back and a majority of the nodes confirmed its subscription.
// Two majorities share a node, which announces the release to c.
func waitLine(t *testing.T, s *redisproc.Servers, c *Client, name string) {
	t.Helper()
	require.Eventually(t, func() bool {
		marked := 0
		for _, addr := range s.Addrs {
			v, err := redisproc.Do(t.Context(), addr, "GET", name)
			if err == nil && strings.HasPrefix(v, protocol.WaitedPrefix) {
				marked++
			}
		}
		key := c.stored(name)
		return marked > len(s.Addrs)/2 && c.waker().Waiting(key) && !c.waker().Confirming(key)
	}, 10*time.Second, time.Millisecond)
}

// holding returns the indices of the nodes of s that hold every key of
// keys (as stored). A round returns once a quorum of nodes took its call:
// the others may get it later, or never.
func holding(t *testing.T, s *redisproc.Servers, keys ...string) []int {
	t.Helper()
	var held []int
	for i, addr := range s.Addrs {
		all := true
		for _, k := range keys {
			v, err := redisproc.Do(t.Context(), addr, "GET", k)
			all = all && err == nil && v != ""
		}
		if all {
			held = append(held, i)
		}
	}
	return held
}

// killOthers kills all but keep of the nodes of s, up to n of them.
func killOthers(s *redisproc.Servers, keep []int, n int) {
	for i := range s.Addrs {
		if n > 0 && !slices.Contains(keep, i) {
			s.Kill(i)
			n--
		}
	}
}

// TestElectionLost: a leader whose lock is gone from a majority of the
// nodes learns it at its next extension: Done is closed and its context
// cancelled with ErrLockLost, and Proclaim fails.
func TestElectionLost(t *testing.T) {
	leakcheck.Check(t)
	s, open := electionNodes(t, 3)
	a := open("a", nil)
	ctx := t.Context()
	lead, err := a.Election("job").Campaign(ctx, "a", 300*time.Millisecond)
	require.NoError(t, err)
	held := holding(t, s, "job")
	require.GreaterOrEqual(t, len(held), 2, "Campaign returns once a quorum holds the lock")
	for _, i := range held[:2] {
		admin := redis.NewClient(&redis.Options{Addr: s.Addrs[i], Protocol: 2})
		require.NoError(t, admin.Del(ctx, "job").Err())
		require.NoError(t, admin.Close())
	}
	select {
	case <-lead.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the loss was not seen")
	}
	assert.ErrorIs(t, context.Cause(lead.Context()), ErrLockLost)
	assert.ErrorIs(t, lead.Proclaim(ctx, "a2"), ErrNotHeld)
	assert.ErrorIs(t, lead.Resign(ctx), ErrNotHeld)
}

// TestElectionPaused: a leader paused beyond its validity finds Done
// closed, and its context cancelled, as soon as it looks on waking, on
// the Client's clock.
func TestElectionPaused(t *testing.T) {
	leakcheck.Check(t)
	fake := clock.NewFake(time.Now())
	_, open := electionNodes(t, 3)
	a := open("a", &Options{Fencing: true, Clock: fake})
	lead, err := a.Election("job").Campaign(t.Context(), "a", 10*time.Second)
	require.NoError(t, err)
	select {
	case <-lead.Done():
		t.Fatal("Done closed while valid")
	default:
	}
	fake.Advance(lead.Until().Sub(fake.Now()))
	select {
	case <-lead.Done():
	default:
		t.Fatal("Done open past the validity")
	}
	assert.ErrorIs(t, context.Cause(lead.Context()), ErrLockLost)
	assert.ErrorIs(t, lead.Proclaim(t.Context(), "a2"), ErrNotHeld)
	_ = lead.Resign(t.Context())
}

// TestElectionBadInput: bad input gives an error naming the bad value,
// and leaves no key on the nodes.
func TestElectionBadInput(t *testing.T) {
	s, open := electionNodes(t, 3)
	c := open("a", nil)
	ctx := t.Context()
	for _, tc := range []struct {
		c     *Client
		name  string
		value string
		ttl   time.Duration
		want  string
	}{
		{c, "", "v", time.Second, "empty key (the election's name)"},
		{c, "e", "", time.Second, `election "e": Campaign with an empty value`},
		{c, "e", "v", 0, "ttl 0s"},
		{c, "e", "v", -time.Second, "ttl -1s"},
		{c, "e", "v", 2 * time.Minute, "ttl 2m0s exceeds Options.RestartGuard"},
		{c, protocol.LeaderPrefix + "x", "v", time.Second, "reserved for the records of elections"},
	} {
		_, err := tc.c.Election(tc.name).Campaign(ctx, tc.value, tc.ttl)
		require.Error(t, err, tc.want)
		assert.Contains(t, err.Error(), tc.want)
	}
	_, err := c.Election("").Leader(ctx)
	assert.ErrorContains(t, err, "empty key")
	_, ok := <-c.Election("").Observe(ctx)
	assert.False(t, ok, "Observe of a bad name closes at once")
	_, err = c.Lock(ctx, protocol.LeaderPrefix+"x", time.Second)
	assert.ErrorContains(t, err, "reserved for the records of elections")
	for _, addr := range s.Addrs {
		n, err := redisproc.Do(ctx, addr, "DBSIZE")
		require.NoError(t, err)
		assert.Equal(t, "0", n, "%s: a key was left", addr)
	}
}

// TestElectionObserve: Observe reports nobody, then a leader, its new
// value, with a minority of the nodes down, and, when the leader stops
// extending (its process died), its loss within about one TTL, then the
// next leader with a higher term.
func TestElectionObserve(t *testing.T) {
	leakcheck.Check(t)
	s, open := electionNodes(t, 5)
	a, b, o := open("a", nil), open("b", nil), open("o", &Options{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	seen := o.Election("job").Observe(ctx)
	next := func() LeaderInfo {
		t.Helper()
		select {
		case info, ok := <-seen:
			require.True(t, ok, "Observe closed")
			return info
		case <-time.After(20 * time.Second):
			t.Fatal("no change observed")
		}
		return LeaderInfo{}
	}
	assert.Equal(t, LeaderInfo{}, next(), "nobody leads")

	const ttl = 2 * time.Second
	la, err := a.Election("job").Campaign(ctx, "a:1", ttl)
	require.NoError(t, err)
	info := next()
	assert.Equal(t, "a:1", info.Value)
	assert.Equal(t, la.Term(), info.Term)

	// Two nodes go down, but not three that hold a's lock and record:
	// Campaign returned once a quorum did.
	held := holding(t, s, "job", a.stored(protocol.LeaderPrefix+"job"))
	require.GreaterOrEqual(t, len(held), 3)
	killOthers(s, held[:3], 2)
	require.NoError(t, la.Proclaim(ctx, "a:2"))
	info = next()
	assert.Equal(t, "a:2", info.Value, "with two of five nodes down")
	assert.Equal(t, la.Term(), info.Term)

	// a's process dies: its lock is extended no more, nor released.
	la.stopped.Do(func() { close(la.stop) })
	<-la.watched
	stoppedAt := time.Now()
	assert.Equal(t, LeaderInfo{}, next(), "a's loss")
	assert.Less(t, time.Since(stoppedAt), 3*ttl, "a's loss reported within about one TTL")

	got := make(chan *Leadership, 1)
	go func() {
		lb, err := b.Election("job").Campaign(ctx, "b:1", ttl)
		assert.NoError(t, err)
		got <- lb
	}()
	lb := <-got
	require.NotNil(t, lb)
	info = next()
	assert.Equal(t, "b:1", info.Value)
	assert.Greater(t, info.Term, la.Term())
	require.NoError(t, lb.Resign(ctx))
	assert.Equal(t, LeaderInfo{}, next(), "b resigned")
	cancel()
	for range seen {
	}
}

// TestElectionRecordBehind: a leader's record reaches the nodes one by
// one, and a write that times out on a node, or lands there before the
// lock does, leaves the node without it until the next extension. While a quorum of the nodes hold the leader's lock but fewer
// than a quorum show its record, who leads is unknown: Leader's error does
// not wrap ErrNoLeader, and Observe reports nothing, then the leader once
// its record reaches a quorum. Here Campaign's record is removed from one
// node, as such a write leaves it, and two of the five nodes are down.
func TestElectionRecordBehind(t *testing.T) {
	leakcheck.Check(t)
	s, open := electionNodes(t, 5)
	a, o := open("a", nil), open("o", &Options{})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	la, err := a.Election("job").Campaign(ctx, "a:1", 30*time.Second)
	require.NoError(t, err)
	// Campaign's calls still on their way land first (no extension comes
	// for 10s). Three nodes that hold the lock stay up, one of them
	// without the record.
	settle(a)
	held := holding(t, s, "job")
	require.GreaterOrEqual(t, len(held), 3)
	record := a.stored(protocol.LeaderPrefix + "job")
	_, err = redisproc.Do(ctx, s.Addrs[held[2]], "DEL", record)
	require.NoError(t, err)
	killOthers(s, held[:3], 2)

	_, err = o.Election("job").Leader(ctx)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrNoLeader, "a quorum of the nodes hold a's lock")
	assert.ErrorContains(t, err, "leader unknown")

	seen := o.Election("job").Observe(ctx)
	// Observe has read the nodes once it listens for announcements.
	var early []LeaderInfo
	require.Eventually(t, func() bool {
		select {
		case info := <-seen:
			early = append(early, info)
		default:
		}
		return o.waker().Waiting(record) && !o.waker().Confirming(record)
	}, 10*time.Second, time.Millisecond)
	assert.Empty(t, early, "Observe reported before the record reached a quorum")
	require.NoError(t, la.Proclaim(ctx, "a:2"))
	select {
	case info := <-seen:
		assert.Equal(t, LeaderInfo{Value: "a:2", Term: la.Term(), Owner: "a", TTL: info.TTL}, info, "Observe's first report")
	case <-time.After(20 * time.Second):
		t.Fatal("no report after the Proclaim")
	}
	require.NoError(t, la.Resign(ctx))
	cancel()
	for range seen {
	}
}

// TestElectionClose: closing the Client ends its leadership at once, not
// at the next extension, and the next candidate leads without waiting for
// the TTL: Close released the lock.
func TestElectionClose(t *testing.T) {
	leakcheck.Check(t)
	_, open := electionNodes(t, 3)
	const ttl = time.Minute
	extension := watchSleep(ttl / 3)
	a, b := open("a", &Options{Fencing: true, Clock: extension}), open("b", nil)
	lead, err := a.Election("job").Campaign(t.Context(), "a", ttl)
	require.NoError(t, err)
	extension.wait(t, "the leadership's watch") // until its first extension
	require.NoError(t, a.Close())
	select {
	case <-lead.done: // not Done(), which would check the validity itself
	case <-time.After(ttl / 6):
		t.Fatal("the leadership outlived Close")
	}
	assert.ErrorIs(t, context.Cause(lead.ctx), ErrLockLost)
	ctx, cancel := context.WithTimeout(t.Context(), ttl/6)
	defer cancel()
	lb, err := b.Election("job").Campaign(ctx, "b", ttl)
	require.NoError(t, err, "the lock was not released by Close")
	assert.Greater(t, lb.Term(), lead.Term())
	require.NoError(t, lb.Resign(t.Context()))
}

// TestElectionCampaignEnds: a Campaign whose context ends while another
// leads returns the context's error and ErrNotObtained, and the leader
// keeps the lead; a Campaign without a deadline waits past
// Options.MaxWait.
func TestElectionCampaignEnds(t *testing.T) {
	leakcheck.Check(t)
	_, open := electionNodes(t, 3)
	a, b := open("a", nil), open("b", &Options{Fencing: true, MaxWait: 100 * time.Millisecond})
	la, err := a.Election("job").Campaign(t.Context(), "a", 10*time.Second)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	_, err = b.Election("job").Campaign(ctx, "b", 10*time.Second)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, ErrNotObtained)
	info, err := b.Election("job").Leader(t.Context())
	require.NoError(t, err)
	assert.Equal(t, "a", info.Owner)

	got := make(chan error, 1)
	go func() {
		lb, err := b.Election("job").Campaign(context.WithoutCancel(t.Context()), "b", 10*time.Second)
		if err == nil {
			err = lb.Resign(t.Context())
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond) // thrice b's MaxWait
	require.NoError(t, la.Resign(t.Context()))
	require.NoError(t, <-got, "b campaigned until it led")
}

// TestReadsSkipGuardedNodes: three of five nodes restart from a snapshot
// taken while L1 led and held k, after L1 resigned and L2 took both over.
// The restarted nodes are in their restart guard (another process), and
// hold L1's keys. A read must not count them: it reports neither L1 as the
// leader nor as k's holder, and since two nodes are too few to decide, it
// says that it cannot tell.
func TestReadsSkipGuardedNodes(t *testing.T) {
	leakcheck.Check(t)
	s, open := electionNodes(t, 5)
	ctx := t.Context()
	a, b := open("L1", nil), open("L2", nil)

	lead1, err := a.Election("e").Campaign(ctx, "L1", 30*time.Second)
	require.NoError(t, err)
	la, err := a.Lock(ctx, "k", 30*time.Second)
	require.NoError(t, err)
	settle(a) // L1's keys are on every node
	snapshots := make([]string, 3)
	for i := range snapshots {
		snapshots[i], err = s.Snapshot(i)
		require.NoError(t, err)
	}
	require.NoError(t, lead1.Resign(ctx))
	require.NoError(t, la.Unlock(ctx))
	settle(a)
	lead2, err := b.Election("e").Campaign(ctx, "L2", 30*time.Second)
	require.NoError(t, err)
	defer func() { _ = lead2.Resign(ctx) }()
	lb, err := b.Lock(ctx, "k", 30*time.Second)
	require.NoError(t, err)
	defer func() { _ = lb.Unlock(ctx) }()
	settle(b)
	for i, snap := range snapshots {
		require.NoError(t, s.RestartFrom(ctx, i, snap))
	}

	c := open("reader", nil)
	info, err := c.Election("e").Leader(ctx)
	assert.NotEqual(t, "L1", info.Value, "Leader reports L1, term %d, from the restarted nodes", info.Term)
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrNoLeader, "two nodes in service cannot tell that nobody leads")
	assert.Equal(t, 3, guardedNodes(err), "%v", err)
	h, err := c.Holder(ctx, "k")
	assert.NotEqual(t, "L1", h.Owner, "Holder reports L1 from the restarted nodes")
	require.ErrorIs(t, err, ErrNotHeld)
	assert.Equal(t, 3, guardedNodes(err), "%v", err)
}

// guardedNodes returns how many nodes of err, an *Error, were in their
// restart guard.
func guardedNodes(err error) int {
	var e *Error
	if !errors.As(err, &e) {
		return -1
	}
	n := 0
	for _, r := range e.Nodes {
		if errors.Is(r.Err, ErrGuarded) {
			n++
		}
	}
	return n
}

// TestElectionDefaultClient: Clients made without Options.Fencing, with
// the default waiting, campaign, lead, resign and observe; the terms of
// successive leaders increase, while the Clients' own locks carry no
// fence. Close closes what the elections use, and leaves no lock.
func TestElectionDefaultClient(t *testing.T) {
	leakcheck.Check(t)
	s, open := electionNodes(t, 3)
	a, b := open("a", &Options{}), open("b", &Options{})
	ctx := t.Context()
	l, err := a.Lock(ctx, "plain", time.Second)
	require.NoError(t, err)
	assert.Zero(t, l.Fence(), "a default Client's own locks carry no fence")
	require.NoError(t, l.Unlock(ctx))

	obs := b.Election("sched").Observe(ctx)
	first := <-obs
	assert.Zero(t, first.Term, "nobody leads yet")
	la, err := a.Election("sched").Campaign(ctx, "a", 2*time.Second)
	require.NoError(t, err)
	require.Positive(t, la.Term())
	seen := <-obs
	assert.Equal(t, "a", seen.Value)
	assert.Equal(t, la.Term(), seen.Term)

	got := make(chan *Leadership, 1)
	go func() {
		lb, err := b.Election("sched").Campaign(ctx, "b", 2*time.Second)
		assert.NoError(t, err)
		got <- lb
	}()
	require.NoError(t, la.Resign(ctx))
	lb := <-got
	require.NotNil(t, lb)
	assert.Greater(t, lb.Term(), la.Term(), "the next leader's term is higher")
	info, err := a.Election("sched").Leader(ctx)
	require.NoError(t, err)
	assert.Equal(t, "b", info.Value)
	assert.Equal(t, lb.Term(), info.Term)
	require.NoError(t, lb.Resign(ctx))

	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	_, err = a.Election("sched").Campaign(ctx, "a", time.Second)
	assert.ErrorIs(t, err, ErrClosed)
	for _, addr := range s.Addrs {
		n, err := redisproc.Do(ctx, addr, "EXISTS", a.stored("sched"))
		require.NoError(t, err)
		assert.Equal(t, "0", n, "%s: the election's lock is released", addr)
	}
}

// TestElectionDefaultClientObserver: on a Client without Options.Fencing,
// the Client of its elections reports to the same Observer from the same
// node state, so that a node seen guarded by both a lock and an election
// is reported guarded once.
func TestElectionDefaultClientObserver(t *testing.T) {
	leakcheck.Check(t)
	c := newCluster(t, 3)
	rec := &recorder{}
	cl := c.client(t, &Options{Observer: rec.observer(), RestartGuard: time.Minute})
	ctx := t.Context()
	l, err := cl.TryLock(ctx, "plain", time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	lead, err := cl.Election("sched").Campaign(ctx, "v", time.Second)
	require.NoError(t, err)
	require.NoError(t, lead.Resign(ctx))

	c.restart(0) // node 0 loses its data: guarded
	for _, h := range c.hooks[1:] {
		h.set(func() { time.Sleep(20 * time.Millisecond) }, nil) // node 0 answers each round first
	}
	l, err = cl.TryLock(ctx, "plain", time.Second)
	require.NoError(t, err, "nodes 1 and 2 are a quorum")
	require.NoError(t, l.Unlock(ctx))
	lead, err = cl.Election("sched").Campaign(ctx, "v", time.Second)
	require.NoError(t, err)
	require.NoError(t, lead.Resign(ctx))
	entered := 0
	for _, e := range rec.nodeChanges() {
		if strings.HasSuffix(e, string(GuardEntered)) {
			entered++
		}
	}
	assert.Equal(t, 1, entered, "node 0 reported guarded once: %q", rec.nodeChanges())
}
