package locktest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// FaultKind is one kind of fault a [Schedule] injects into a node.
type FaultKind string

const (
	// Kill kills the node's server (SIGKILL). It stays down for
	// Schedule.KillDowntime and then starts again, empty.
	Kill FaultKind = "kill"
	// Pause freezes the node's server (SIGSTOP, or docker pause).
	Pause FaultKind = "pause"
	// Partition cuts the node off from every client: traffic stalls.
	Partition FaultKind = "partition"
	// ClientPartition cuts the node off from one client view
	// (Schedule.Views) only, so that clients see different sets of nodes.
	ClientPartition FaultKind = "client-partition"
	// Latency delays the node's traffic each way by 1 ms to
	// Schedule.MaxLatency.
	Latency FaultKind = "latency"
	// Failover fails the node over to a replica that lacks the writes of
	// the last Schedule.FailoverLag/10 to FailoverLag. The node must have a
	// replica ([WithReplicas], or the Docker rig's WithReplicas).
	Failover FaultKind = "failover"
)

// AllFaults returns every kind of fault that needs no replica.
func AllFaults() []FaultKind { return []FaultKind{Kill, Pause, Partition, ClientPartition, Latency} }

// ReplicatedFaults returns every kind of fault: [AllFaults] and Failover.
func ReplicatedFaults() []FaultKind { return append(AllFaults(), Failover) }

// Target is a node a [Schedule] can fault. [*Node] is one.
type Target interface {
	Name() string
	Kill(ctx context.Context) error
	Start(ctx context.Context) error
	Pause() error
	Unpause() error
	Partition()
	Heal()
	SetLatency(d time.Duration)
	Failover(ctx context.Context, lag time.Duration) error
}

// Link is one client's own way to one node, which a ClientPartition cuts.
// The links that [Cluster.View] returns are Links.
type Link interface {
	Partition()
	Heal()
}

// Schedule is a random fault schedule. The zero value of a field means its
// default. At most MaxFaulty nodes are faulted at once. A new fault is
// considered every Gap on average. A pause, partition or latency lasts
// 100 ms to 1 s, and a kill KillDowntime. Kinds are dealt like cards: each
// comes once, in a random order, in every len(Kinds) faults. So a run of a
// few dozen faults injects every kind several times. Two runs with one Seed
// draw the same faults in the same order, on the same nodes, with the same
// durations. When each happens also depends on how fast the faults before
// it were repaired.
type Schedule struct {
	Seed      uint64      // the random source's seed; 0 draws one (see [Chaos.Seed])
	Kinds     []FaultKind // the kinds to pick from ([AllFaults], without ClientPartition when Views is empty)
	MaxFaulty int         // a minority of the nodes: (nodes-1)/2
	Gap       time.Duration
	// Nodes limits the schedule to these nodes (indices); all when empty.
	Nodes []int
	// KillDowntime is how long a killed node stays down (1s). Make it
	// longer than the TTL, so that a lost lock key never matters. Make it
	// shorter to test a node that forgets a held lock. Negative means zero.
	KillDowntime time.Duration
	MaxLatency   time.Duration // 100ms
	FailoverLag  time.Duration // 500ms
	// Views are the clients' own links to the nodes, by client and then
	// node, for ClientPartition, which cuts one node from one view.
	Views [][]Link
}

func (s *Schedule) defaults(nodes int) {
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if len(s.Kinds) == 0 {
		s.Kinds = AllFaults()
		if len(s.Views) == 0 {
			s.Kinds = slices.DeleteFunc(s.Kinds, func(k FaultKind) bool { return k == ClientPartition })
		}
	}
	if s.MaxFaulty == 0 {
		s.MaxFaulty = (nodes - 1) / 2
	}
	for s.Seed == 0 {
		s.Seed = rand.Uint64()
	}
	defD(&s.Gap, 300*time.Millisecond)
	defD(&s.KillDowntime, time.Second)
	defD(&s.MaxLatency, 100*time.Millisecond)
	defD(&s.FailoverLag, 500*time.Millisecond)
	s.KillDowntime = max(s.KillDowntime, 0)
}

// Fault is one fault a schedule injected. It says on which node, of what
// kind, from when to when (wall-clock UnixNano), and how it went.
type Fault struct {
	Node       int
	Name       string
	Kind       FaultKind
	Start, End int64
	// Refused is set when the backend refused the fault, which then never
	// took effect. Docker's freezer sometimes refuses a pause under load.
	Refused bool
	Err     string // a failure to inject or repair the fault
}

// Chaos is a running [Schedule]. Stop it with [Chaos.Stop].
type Chaos struct {
	s      Schedule
	nodes  []Target
	rnd    *rand.Rand
	cancel context.CancelFunc
	loop   sync.WaitGroup // the schedule's loop
	wg     sync.WaitGroup // running faults

	deck []FaultKind // the kinds still to deal in this round of Kinds

	mu     sync.Mutex
	busy   map[int]bool // nodes under a fault
	faults []Fault
}

// Run starts the schedule s on nodes and returns at once. The schedule runs
// until [Chaos.Stop], or until ctx is done. The faults it injects use
// contexts of their own. Run panics, as on a programming error, when s names
// a node that nodes lack. It also panics on a negative Gap, MaxLatency,
// FailoverLag or MaxFaulty.
func (s Schedule) Run(ctx context.Context, nodes ...Target) *Chaos {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Gap", s.Gap}, {"MaxLatency", s.MaxLatency}, {"FailoverLag", s.FailoverLag}} {
		if d.v < 0 {
			panic(fmt.Sprintf("locktest: Schedule.%s %v: must not be negative", d.name, d.v))
		}
	}
	if s.MaxFaulty < 0 {
		panic(fmt.Sprintf("locktest: Schedule.MaxFaulty %d: must not be negative", s.MaxFaulty))
	}
	s.defaults(len(nodes))
	for _, i := range s.Nodes {
		if i < 0 || i >= len(nodes) {
			panic(fmt.Sprintf("locktest: Schedule.Nodes lists node %d of %d", i, len(nodes)))
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	c := &Chaos{s: s, nodes: nodes, rnd: rand.New(rand.NewPCG(s.Seed, s.Seed^0x9e3779b97f4a7c15)),
		cancel: cancel, busy: map[int]bool{}}
	c.loop.Go(func() { c.run(ctx) })
	return c
}

// Start is [Schedule.Run] for a test. The schedule stops in t.Cleanup. A
// fault that could not be injected or repaired fails t. When t has failed,
// Start logs the seed, so that a rerun with the seed draws the same faults.
func (s Schedule) Start(t testing.TB, nodes ...Target) *Chaos {
	t.Helper()
	c := s.Run(context.WithoutCancel(t.Context()), nodes...)
	t.Cleanup(func() {
		for _, f := range c.Stop() {
			if f.Err != "" {
				t.Errorf("locktest: %s", f.Err)
			}
		}
		if t.Failed() {
			t.Logf("locktest: fault schedule seed %d (Schedule.Seed reproduces it)", c.Seed())
		}
	})
	return c
}

// Seed returns the schedule's seed.
func (c *Chaos) Seed() uint64 { return c.s.Seed }

// Stop stops the schedule and waits until every fault it injected has been
// repaired. It returns the faults in the order they started. Calling it
// again returns the same faults.
func (c *Chaos) Stop() []Fault {
	c.cancel()
	c.loop.Wait()
	c.wg.Wait()
	return c.Faults()
}

// Faults returns the faults injected so far. Those still running have End 0.
func (c *Chaos) Faults() []Fault {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.faults)
}

// plan is one drawn fault: everything random about it, drawn in the loop.
type plan struct {
	node int
	kind FaultKind
	d    time.Duration // how long it lasts
	lat  time.Duration // Latency's delay
	lag  time.Duration // Failover's lag
	view int           // ClientPartition's view
}

// run considers a new fault every Gap on average until ctx is done.
func (c *Chaos) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(c.rnd.Int64N(int64(2 * c.s.Gap)))):
		}
		p, ok := c.draw()
		if !ok {
			continue
		}
		c.mu.Lock()
		c.busy[p.node] = true
		i := len(c.faults)
		c.faults = append(c.faults, Fault{Node: p.node, Name: c.nodes[p.node].Name(), Kind: p.kind, Start: time.Now().UnixNano()})
		c.mu.Unlock()
		c.wg.Go(func() { c.inject(i, p) })
	}
}

// draw picks a free node and a fault for it. It reports false when
// MaxFaulty nodes are faulted already or no node is free.
func (c *Chaos) draw() (plan, bool) {
	c.mu.Lock()
	var free []int
	if len(c.busy) < c.s.MaxFaulty {
		for i := range c.nodes {
			if !c.busy[i] && (len(c.s.Nodes) == 0 || slices.Contains(c.s.Nodes, i)) {
				free = append(free, i)
			}
		}
	}
	c.mu.Unlock()
	if len(free) == 0 {
		return plan{}, false
	}
	p := plan{node: free[c.rnd.IntN(len(free))], kind: c.deal()}
	p.d = 100*time.Millisecond + time.Duration(c.rnd.Int64N(int64(900*time.Millisecond)))
	p.lat = time.Millisecond + time.Duration(c.rnd.Int64N(int64(c.s.MaxLatency)))
	p.lag = c.s.FailoverLag/10 + time.Duration(c.rnd.Int64N(int64(c.s.FailoverLag*9/10+1)))
	if len(c.s.Views) > 0 {
		p.view = c.rnd.IntN(len(c.s.Views))
	}
	return p, true
}

// deal returns the next kind from the deck. When the deck is empty, it
// shuffles a new deck of Kinds. Only the loop calls it.
func (c *Chaos) deal() FaultKind {
	if len(c.deck) == 0 {
		c.deck = slices.Clone(c.s.Kinds)
		c.rnd.Shuffle(len(c.deck), func(i, j int) { c.deck[i], c.deck[j] = c.deck[j], c.deck[i] })
	}
	k := c.deck[len(c.deck)-1]
	c.deck = c.deck[:len(c.deck)-1]
	return k
}

// inject applies fault i, drawn as p, and repairs it.
func (c *Chaos) inject(i int, p plan) {
	n := c.nodes[p.node]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	refused := false
	var err error
	switch p.kind {
	case Kill:
		if err = n.Kill(ctx); err == nil {
			time.Sleep(c.s.KillDowntime)
		}
		err = errors.Join(err, n.Start(ctx))
	case Pause:
		if err = retry(n.Pause); err != nil {
			refused, err = true, nil
			break
		}
		time.Sleep(p.d)
		err = retry(n.Unpause)
	case Partition:
		n.Partition()
		time.Sleep(p.d)
		n.Heal()
	case ClientPartition:
		err = c.partitionView(p)
	case Latency:
		n.SetLatency(p.lat)
		time.Sleep(p.d)
		n.SetLatency(0)
	case Failover:
		err = n.Failover(ctx, p.lag)
	default:
		err = fmt.Errorf("unknown fault kind %q", p.kind)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.busy, p.node)
	f := &c.faults[i]
	f.End, f.Refused = time.Now().UnixNano(), refused
	if err != nil {
		f.Err = fmt.Sprintf("%s of %s: %v", p.kind, n.Name(), err)
	}
}

// partitionView cuts node p.node off from view p.view for p.d.
func (c *Chaos) partitionView(p plan) error {
	if len(c.s.Views) == 0 || p.node >= len(c.s.Views[p.view]) {
		return errors.New("ClientPartition needs Schedule.Views with a link to every node")
	}
	l := c.s.Views[p.view][p.node]
	l.Partition()
	time.Sleep(p.d)
	l.Heal()
	return nil
}

// retry calls op up to five times, 100ms apart, until it succeeds.
func retry(op func() error) error {
	var err error
	for range 5 {
		if err = op(); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// Count returns how many faults of each kind took effect, leaving out
// refused ones. It has an entry for every kind of kinds, even when none did.
func Count(faults []Fault, kinds ...FaultKind) map[FaultKind]int {
	n := make(map[FaultKind]int, len(kinds))
	for _, k := range kinds {
		n[k] = 0
	}
	for _, f := range faults {
		if !f.Refused {
			n[f.Kind]++
		}
	}
	return n
}
