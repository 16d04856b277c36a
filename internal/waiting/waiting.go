package waiting

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/wake"
	"github.com/redquorum/redquorum/quorum"
)

// Why a wait ended without a reason to try again (besides the caller's
// context's error, which ends it too).
var (
	// ErrClosed: the Client began to close.
	ErrClosed = errors.New("waiting: client closed")
	// ErrMaxWait: the call waited Config.MaxWait.
	ErrMaxWait = errors.New("waiting: gave up after MaxWait")
)

// Config is what a strategy knows of its Client: settings fixed when the
// Client is made.
type Config struct {
	Clock  clock.Clock
	Quorum int // of the nodes
	// MinRetry and MaxRetry bound the backoff between rounds; MaxWait is
	// how long a call whose context has no deadline waits.
	MinRetry, MaxRetry, MaxWait time.Duration
	Owner                       string // named in the waiters' tokens (protocol.NewToken)
	Prefix                      string // before every key as stored on the nodes
	NodeTimeout                 time.Duration
	Drift                       float64 // the clock drift factor of the validity (clock.Validity)
	// YieldWindow is how long after an announcement that named a waiter
	// of another client a call's first round lets that waiter go first
	// (see inLineWait.First). GraceCap and GraceFloor bound the grace that
	// a waiter gives the waiter named next in line (see inLineWait.grace).
	YieldWindow, GraceCap, GraceFloor time.Duration
	// WakeIdle is how long a key stays subscribed for release
	// announcements after its last wait (internal/wake).
	WakeIdle time.Duration
	Proto    *protocol.Protocol // the Client's commands
}

// Host is what a strategy asks of its Client while it runs: the Client's
// lifetime, its calls to the nodes and its releases.
type Host interface {
	// Closing is closed once the Client begins to close.
	Closing() <-chan struct{}
	// Enter returns an error on a closed Client; otherwise Close waits
	// for the matching Exit.
	Enter() error
	Exit()
	// Start calls fn for every node in the background, on the Client's
	// workers, each decided at timeout and lingering after it
	// (quorum.Workers.StartLinger).
	Start(ctx context.Context, timeout time.Duration, fn func(ctx context.Context, node int) error) *quorum.Round
	// CallTimeout is the timeout of a round's node calls now.
	CallTimeout() time.Duration
	// ReleaseAside sends rel, a release outside any lock call, on every
	// node, named name, without waiting for it. On each node it waits
	// for last's answer there (nil: none), the round that rel releases;
	// ttl is for its tombstones. On a closed Client it sends nothing.
	ReleaseAside(name string, rel protocol.Release, last *quorum.Round, ttl time.Duration)
	// Release sends cmd, a release of key (as stored), to node.
	Release(ctx context.Context, node int, cmd protocol.Cmd, key string) error
	// InLine reads key (as stored) on node, and whether member is in
	// line (see node.Node.InLine).
	InLine(ctx context.Context, node int, key, line, member string) (value string, queued bool, err error)
}

// Kind is a waiting strategy: what the nodes do for a Client's waiters.
type Kind uint8

const (
	// Backoff: the nodes announce a marked key's release (announce.lua).
	Backoff Kind = iota
	// InLine: and keep the waiters in line, naming the next (inline.lua).
	InLine
	// Handoff: and hand the key off to the next (handoff.lua).
	Handoff
)

// Strategy is a Client's waiting strategy: the one seam between the lock
// rounds, which know nothing of waiting, and the ways to wait between
// them. The lock, its rounds, the Client and the release path keep none
// of a strategy's state and reach it only through these methods. The
// strategies are backoff (backoff.go), inLine (inline.go) and handoff
// (handoff.go), each over the one before; see docs/ARCHITECTURE.md.
type Strategy interface {
	// Wait returns the wait of one lock call for keys (as given) with
	// ctx, which began at began, with its Waiter (one allocation for
	// both). With ctxOnly only ctx bounds the wait, not Config.MaxWait.
	Wait(ctx context.Context, keys []string, began time.Time, ctxOnly bool) Wait
	// Waiter returns a waiter of the backoff alone, for callers that wait
	// on keys of their own (a semaphore's slots), to keep in their own
	// value: a waiter holds no pointer to itself.
	Waiter(ctx context.Context, began time.Time, ctxOnly bool) Waiter
	// Refused returns the release (but for its keys) that the release of
	// the lock of token, whose round told the nodes j, sends to a node that
	// refused that round, and false for none: the lock never held the
	// keys there.
	Refused(token string, j protocol.Join) (protocol.Release, bool)
	// Unlocked is told that the lock of token is being released.
	Unlocked(token string)
	// Waker returns the strategy's pub/sub connections to the nodes, on
	// which every wait for a key's release listens (semaphores' and
	// elections' too).
	Waker() *wake.Waker
	// Direct reports whether a lock call for key (as given) that begins
	// now, with no other caller of this Client for the key, makes its first
	// round as TryLock does, before it has a waiter. It does when the
	// strategy has no reason to let another client's waiter go first (see
	// inLineWait.first) and this Client did not wait for the key lately.
	// After a refusal the waiter listens for the key. Its new subscription
	// ends the wait once a majority of the nodes confirm it (see
	// wake.Waker.Listen). Its first round joins the line with the direct
	// round's start as its ticket.
	Direct(key string) bool
	// Close stops the strategy's background work and waits for it.
	Close()
}

// Wait is one lock call's part of its strategy, between its rounds. The
// errors its methods return are ErrClosed, ErrMaxWait and the context's.
type Wait interface {
	// Waiter returns the call's waiter.
	Waiter() *Waiter
	// First is called once, before the first round, after the caller's
	// turn in the Client's local queue; it may make the caller wait, to
	// let another client's waiter go first.
	First() error
	// Join returns what the next round tells the strategy on the nodes.
	Join() Join
	// Failed is told that the round of j failed; calls are its acquires
	// and ttl the lock's.
	Failed(j Join, ttl time.Duration, calls *quorum.Round)
	// Delay returns the wait before the next round, given d, the backoff.
	Delay(d time.Duration) time.Duration
	// Sleep waits until timer fires, or until the strategy has a reason to
	// try sooner.
	Sleep(timer <-chan time.Time) error
	// Handed returns the lock that the nodes handed off to this waiter,
	// with ttl, and false for none. Callers are within Host.Enter.
	Handed(ttl time.Duration) (Hand, bool)
	// Done is told that the call returns the lock of token, or "" when
	// it failed.
	Done(token string)
}

// Join is what one round of a waiter tells the strategy on the nodes.
type Join struct {
	Token string        // the round's token; "" for a new one
	On    protocol.Join // the strategy's arguments
	Start time.Time     // when the round was sent, when the strategy needs it
}

// Hand is a lock that a quorum of nodes handed off to a waiter's round:
// its keys hold Token, a hand value, since no earlier than Start, and it
// is valid until Until. Join is the waiter's place, which the lock's
// top-up takes off the line; Nodes has a bit for each node that handed it
// off, and Last is the round that joined the line (see the Client's top-up).
type Hand struct {
	Token        string
	Start, Until time.Time
	Join         protocol.Join
	Nodes        uint64
	Last         *quorum.Round
}

// New returns the strategy kind of a Client with cfg and host, which
// waits for announcements on the nodes clients.
func New(kind Kind, cfg Config, host Host, clients []redis.UniversalClient) Strategy {
	b := &backoff{cfg: cfg, host: host}
	inLine := &inLine{backoff: b}
	var s Strategy
	var ledger *wake.Ledger // nil: no handoffs
	switch kind {
	case Backoff:
		s = b
	case InLine:
		s = inLine
	default:
		h := &handoff{inLine: inLine, channel: protocol.HandChannel + protocol.NewToken("")}
		cfg.Proto.WithHandChannel(h.channel)
		h.ledger = wake.NewLedger(h.channel, h.releaseStray)
		s, ledger = h, h.ledger
	}
	b.wake = wake.New(clients, cfg.WakeIdle, cfg.Clock, ledger)
	return s
}

// Handoffs is what the handoff strategy tells of its handoffs: for tests.
type Handoffs interface {
	// Channel returns the Client's hand channel.
	Channel() string
	// Ledger returns what the nodes told of handoffs.
	Ledger() *wake.Ledger
	// Sole reports whether the lock with hand value token was handed off
	// to its waiter's only round, and is not yet unlocked.
	Sole(token string) bool
	// ReleaseStray releases key (as stored) on node where it was handed
	// off to the round with token, which no waiter expects.
	ReleaseStray(node int, token, key string)
}
