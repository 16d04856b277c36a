// Package node is one lock node as a client sees it. A [Node] has a go-redis
// client, a name, a [Kind] (a plain master, a Redis Cluster, a Ring) and
// request slots. It batches its commands, redelivers its releases left in
// doubt and names its state key. Its calls (acquire, release, extend, fence)
// speak the [protocol] and return typed replies.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/clock"
	"github.com/redquorum/redquorum/internal/hashslot"
	"github.com/redquorum/redquorum/internal/protocol"
)

// Per-node outcomes of the calls.
var (
	// ErrNotOurs is the outcome of a release, extend or fence on a node
	// whose keys are gone or hold another token.
	ErrNotOurs = errors.New("key missing or held by another token")
	// ErrNotSent is the outcome of an acquire that was never sent. Its
	// round was decided, or its time ran out, while the node's requests in
	// flight were at the limit. The node cannot hold the keys.
	ErrNotSent = errors.New("not sent: the node was busy and the round did not need it")
	// ErrReplica is the outcome of a call on a connection to a server that
	// is a replica: the connection check refused it (see connCheck).
	ErrReplica = errors.New("the server is a replica, not a master")
)

// Kind is what a node client is.
type Kind uint8

const (
	// Plain is a single master (a *redis.Client, or a client of an unknown type).
	Plain Kind = iota
	// Cluster is a Redis Cluster: its state key is one per hash slot.
	Cluster
	// Ring is a go-redis Ring: the lock's first key picks the shard.
	Ring
)

// Config is what the nodes of one client share. Nothing in it changes once
// a node is made.
type Config struct {
	Prefix   string // the client's key prefix
	Protocol *protocol.Protocol
	Clock    clock.Clock
	Log      *slog.Logger
	Tags     *hashslot.Tags // hash tags for the state keys of Cluster nodes
	// Servers tells the nodes' servers apart (see Servers.Seen); nil
	// checks nothing.
	Servers *Servers
	// Checked is set when the nodes' clients already check their
	// connections for another set of nodes (see connCheck): New adds no
	// check of its own.
	Checked bool
	// Closing is closed when the client begins to close: redelivery makes
	// its last attempt and takes no new releases.
	Closing <-chan struct{}

	// ScriptAcquires sends every acquire as the script, never as the
	// pipelined acquire (see Node.pipelines).
	ScriptAcquires bool

	// BatchWindow is how long after a batch was sent later commands still
	// queue behind it (see batcher; measured on the system clock).
	BatchWindow time.Duration
	// RedeliveryLimit bounds each node's backlog of releases in doubt;
	// beyond it the oldest are dropped (their keys expire with their TTL).
	RedeliveryLimit int
	// RedeliverFirst and RedeliverMax are the first and the largest delay
	// between redelivery attempts; the delay doubles in between.
	RedeliverFirst, RedeliverMax time.Duration
	// RedeliverTimeout bounds one redelivery attempt, and so how long a
	// client's Close waits for a node that does not answer.
	RedeliverTimeout time.Duration
}

// Node is one lock node. Its methods are safe for concurrent use.
type Node struct {
	name   string
	kind   Kind
	client redis.UniversalClient
	// sentinel is set for a client made by redis.NewFailoverClient.
	sentinel bool
	cfg      *Config
	// slots bounds the requests in flight to the connection pool (see
	// enter); nil for a node without a limit.
	slots chan struct{}
	proc  batchedClient // sends acquires and releases through the batcher
	redo  redelivery
	// closedWarned is set once a release found the node client closed.
	closedWarned atomic.Bool
	// established is set while the node's last acquire script found it
	// established; foundAt is when a pipelined acquire last found its key
	// taken (Unix ns). See pipelines.
	established atomic.Bool
	foundAt     atomic.Int64
	// noJoins is set once the server refused a pipelined join as a whole
	// (see protocol.JoinCmds.Refused): the node's waiters' rounds go as the
	// script from then on.
	noJoins atomic.Bool
}

// foundFor is how long after a pipelined acquire found its key taken the
// node's acquires go as the script.
const foundFor = 100 * time.Millisecond

// pipelines reports whether the node's next acquire may go as the pipelined
// one. That needs a plain node, established at its last acquire script, where
// no pipelined acquire found its key taken within foundFor. Elsewhere the
// pipeline would mostly decide nothing and cost a round trip more: on a new
// deployment, a node in its guard, or a key that others contend for. The
// script also tells the waiting strategy of such a key's refusal.
func (n *Node) pipelines() bool {
	if n.kind != Plain || n.cfg.ScriptAcquires || !n.established.Load() {
		return false
	}
	f := n.foundAt.Load()
	return f == 0 || time.Now().UnixNano()-f > int64(foundFor) // no clock read until a key was found taken
}

// New returns the node of client, named name in errors and logs. On a
// *redis.Client it adds the connection check (see connCheck) to the
// client's OnConnect, so New must run before other goroutines use client.
func New(client redis.UniversalClient, name string, cfg *Config) *Node {
	n := &Node{name: name, client: client, cfg: cfg}
	switch c := client.(type) {
	case *redis.ClusterClient:
		n.kind = Cluster
	case *redis.Ring:
		n.kind = Ring
	case *redis.Client:
		if size := c.Options().PoolSize; size > 0 {
			n.slots = make(chan struct{}, size)
		}
		n.sentinel = c.Options().Addr == "FailoverClient"
		if !cfg.Checked {
			n.installCheck(c)
		}
	}
	n.proc = batchedClient{b: &batcher{window: cfg.BatchWindow}, client: client}
	return n
}

// Name returns the node's name: its address, or "node N".
func (n *Node) Name() string { return n.name }

// Kind returns what the node's client is.
func (n *Node) Kind() Kind { return n.kind }

// ScriptKeys returns the KEYS of the acquire, extend and fence scripts on
// this node. akeys holds the lock keys as stored, then the plain state key
// ([protocol.StateKey] after the prefix). On a Cluster node the state key is
// the one in the first key's hash slot. Elsewhere akeys is used as it is.
func (n *Node) ScriptKeys(akeys []string) []string {
	if n.kind != Cluster {
		return akeys
	}
	k := make([]string, len(akeys))
	copy(k, akeys[:len(akeys)-1])
	k[len(k)-1] = protocol.SlotStateKey(n.cfg.Prefix, akeys[0], n.cfg.Tags)
	return k
}

// Decider tells a node whether the round of an acquire has been decided.
type Decider interface {
	IsDecided() bool
	// Decided returns a channel that is closed once the round is decided.
	Decided() <-chan struct{}
}

// Acquire asks the node for the lock in a, whose Keys end with the plain
// state key. shared, when not nil, is a's command, built once for every node
// that uses the plain state key. d is the acquire's round (see [Node.enter]).
// An acquire that [protocol.Protocol.Pipelined] allows goes as the pipelined
// acquire first where the node [Node.pipelines]; a waiter's round that
// [protocol.Protocol.PipelinedJoin] allows goes as the pipelined join on a
// plain node. Either goes as the script when its replies decide nothing.
func (n *Node) Acquire(ctx context.Context, a *protocol.Acquire, shared protocol.Cmd, d Decider) (protocol.AcquireReply, error) {
	if err := n.enter(ctx, d); err != nil {
		return protocol.AcquireReply{}, err
	}
	defer n.exit()
	if n.pipelines() && n.cfg.Protocol.Pipelined(a) {
		pa := n.cfg.Protocol.NewPipelined(ctx, a, shared)
		n.proc.b.doAll(ctx, n.client, pa.Cmds())
		granted, found, err := pa.Reply()
		n.cfg.Protocol.PutPipelined(pa)
		if err != nil {
			return protocol.AcquireReply{}, n.explain(err)
		}
		if granted {
			return protocol.AcquireReply{Kind: protocol.Granted}, nil
		}
		if found {
			n.foundAt.Store(time.Now().UnixNano())
		}
	}
	cmd := shared
	if n.kind == Plain && !n.cfg.ScriptAcquires && !n.noJoins.Load() && n.cfg.Protocol.PipelinedJoin(a) {
		jc := n.cfg.Protocol.NewJoin(ctx, a)
		n.proc.b.doAll(ctx, n.client, jc.Cmds())
		rep, joined, free, err := jc.Reply()
		refused := jc.Refused()
		n.cfg.Protocol.PutJoin(jc)
		if refused && !n.noJoins.Swap(true) {
			n.cfg.Log.Debug("redlock: the node refuses the pipelined join; its waiters' rounds go as the script", "node", n.name)
		}
		if err != nil {
			return protocol.AcquireReply{}, n.explain(err)
		}
		if joined {
			return rep, nil
		}
		if free {
			// A grant takes the transaction's entry off.
			b := *a
			b.Join.Entries = protocol.MayHave
			cmd = n.cfg.Protocol.AcquireCmd(b)
		}
	}
	if cmd == nil || n.kind == Cluster {
		b := *a
		b.Keys = n.ScriptKeys(a.Keys)
		cmd = n.cfg.Protocol.AcquireCmd(b)
	}
	v, err := n.cfg.Protocol.Run(ctx, &n.proc, cmd)
	if err != nil {
		return protocol.AcquireReply{}, n.explain(err)
	}
	rep, err := protocol.DecodeAcquire(v)
	if err == nil && n.established.Load() != (rep.Kind != protocol.Guarded) {
		n.established.Store(rep.Kind != protocol.Guarded)
	}
	return rep, err
}

// Release sends cmd, the release of a lock (named key in logs) with the
// given ttl. A release that gets no answer is sent again in the background
// until the node answers or ttl has passed (see redelivery). It returns
// ErrNotOurs when a key was gone or held another token.
func (n *Node) Release(ctx context.Context, cmd protocol.Cmd, ttl time.Duration, key string) error {
	if err := n.enter(ctx, nil); err != nil {
		n.cfg.Log.Debug("redlock: release not sent: the node stayed busy", "node", n.name, "key", key, "err", err)
		n.redeliver(cmd, ttl, key, err)
		return err
	}
	v, err := n.cfg.Protocol.RunInt(ctx, &n.proc, cmd)
	n.exit()
	if errors.Is(err, redis.ErrClosed) {
		if !n.closedWarned.Swap(true) {
			n.cfg.Log.Warn("redlock: a release could not be sent: the node client is closed; close the Client before its node clients, or its locks stay on the node until their TTL",
				"node", n.name, "key", key)
		}
		return err // nothing to retry on a closed client
	}
	if err != nil {
		n.cfg.Log.Debug("redlock: release failed", "node", n.name, "key", key, "err", err)
		if inDoubt(err) {
			n.redeliver(cmd, ttl, key, err)
		}
		return err
	}
	return held(v)
}

// Extend sets the TTL of the lock with token on akeys (as for Acquire) to
// ttl, if the node still holds it. For a semaphore or a read-write lock, it
// extends within the limit layer l, which is zero for a lock.
func (n *Node) Extend(ctx context.Context, akeys []string, l protocol.Layer, token string, ttl time.Duration) error {
	return n.call(ctx, n.cfg.Protocol.ExtendIn(l, n.ScriptKeys(akeys), token, ttl))
}

// Fence writes fence back to the node's fence counter, if the node still
// holds the lock with token on akeys (as for Acquire).
func (n *Node) Fence(ctx context.Context, akeys []string, token string, fence int64) error {
	return n.call(ctx, n.cfg.Protocol.Fence(n.ScriptKeys(akeys), token, fence))
}

// Elect runs an election's record script (see [protocol.Protocol.Elect]) on
// keys: the election's lock key and record key, as stored. It returns
// ErrNotOurs when the node changed nothing.
func (n *Node) Elect(ctx context.Context, keys []string, token, record string, announce bool) error {
	return n.call(ctx, n.cfg.Protocol.Elect(keys, token, record, announce))
}

// call runs a token-guarded script in one of the node's slots.
func (n *Node) call(ctx context.Context, cmd protocol.Cmd) error {
	if err := n.enter(ctx, nil); err != nil {
		return err
	}
	defer n.exit()
	v, err := n.cfg.Protocol.RunInt(ctx, n.client, cmd)
	if err != nil {
		return n.explain(err)
	}
	return held(v)
}

// explain adds what go-redis leaves out to err: a Sentinel client reports a
// master name that no Sentinel knows as "all sentinels ... unreachable".
func (n *Node) explain(err error) error {
	if n.sentinel && strings.Contains(err.Error(), "all sentinels") {
		return fmt.Errorf("no master from the Sentinels (unreachable, or they know no master of that name): %w", err)
	}
	return err
}

func held(v int64) error {
	if !protocol.Held(v) {
		return ErrNotOurs
	}
	return nil
}

// enter takes one of the node's request slots, which keep its requests in
// flight within its connection pool. An acquire (d not nil) that finds a free
// slot is always sent, so that a healthy node holds the lock as well and an
// extension survives the loss of a node. Otherwise it waits only while its
// round needs it: once the round is decided or ctx is done, enter returns
// ErrNotSent. An acquire not sent cannot have set the keys, so leaving it out
// never weakens the lock. Other requests (d nil) wait for a slot until ctx is
// done, then return ctx.Err(). Beyond the pool, a slow node's requests would
// wait for a connection past the node timeout. Each would be abandoned
// mid-read and its connection redialled, at a cost to every later request.
func (n *Node) enter(ctx context.Context, d Decider) error {
	s := n.slots
	if s == nil {
		return nil
	}
	select {
	case s <- struct{}{}:
		return nil
	default:
	}
	var decided <-chan struct{}
	if d != nil {
		if d.IsDecided() {
			return ErrNotSent
		}
		decided = d.Decided()
	}
	select {
	case s <- struct{}{}:
		if d != nil && d.IsDecided() {
			<-s
			return ErrNotSent
		}
		return nil
	case <-decided:
		return ErrNotSent
	case <-ctx.Done():
		if d != nil {
			return ErrNotSent
		}
		return ctx.Err()
	}
}

// exit gives back the slot taken by enter.
func (n *Node) exit() {
	if n.slots != nil {
		<-n.slots
	}
}

// Wait waits for the node's background work (the redelivery of releases in
// doubt) to end. Call it after Config.Closing is closed and once no call of
// the node is in flight.
func (n *Node) Wait() { n.redo.wg.Wait() }
