package node

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/protocol"
)

// connCheck is the connection check (check.lua). Every new connection of a
// plain node's client runs it on its server before any lock command. It
// refuses a replica. It starts the restart guard on a server whose data may
// have come from elsewhere since the node's state was recorded: another
// process (a restarted master, a promoted replica), or a process that was a
// replica since. Such a server may lack lock keys it granted.
//
// A connection stays with one server for its life. So every server that a lock
// command reaches through the client has been checked in its current role.
// A replica promoted while a connection to it stays open would be the
// exception. But the check refuses every connection to a replica, and
// Sentinel closes the client connections of a server it promotes.
type connCheck struct {
	n        *Node
	stateKey string // the node's state key as stored
	// unchecked is set once a check found INFO unreadable; refused is set
	// once a check found a replica (each is logged once).
	unchecked, refused atomic.Bool
}

// checks are the connection checks of one *redis.Client. Its OnConnect runs
// the client's previous OnConnect, then the check of every node made on the
// client whose lock client has not begun to close. Every node made on the
// client shares one checks. So the client's OnConnect stays one call deep,
// however many lock clients were made on it.
type checks struct {
	prev func(context.Context, *redis.Conn) error // the OnConnect before

	mu   sync.Mutex
	live []*connCheck
}

// probeKey is the context key under which installCheck asks an OnConnect
// that is a checks' for its checks.
type probeKey struct{}

// onConnect is the client's OnConnect.
func (cs *checks) onConnect(ctx context.Context, cn *redis.Conn) error {
	if p, ok := ctx.Value(probeKey{}).(**checks); ok {
		*p = cs
		return nil
	}
	if cs.prev != nil {
		if err := cs.prev(ctx, cn); err != nil {
			return err
		}
	}
	for _, cc := range cs.current() {
		if err := cc.run(ctx, cn); err != nil {
			return err
		}
	}
	return nil
}

// current returns the checks of the nodes whose lock client is not closing,
// dropping the others.
func (cs *checks) current() []*connCheck {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.live = slices.DeleteFunc(cs.live, (*connCheck).closing)
	return slices.Clone(cs.live)
}

// installCheck adds n's check to client's OnConnect, which keeps what it
// did before. Connections the client opened before are not checked.
func (n *Node) installCheck(client *redis.Client) {
	cc := &connCheck{n: n, stateKey: n.cfg.Prefix + protocol.StateKey}
	opt := client.Options()
	cs := checksOf(opt.OnConnect)
	if cs == nil {
		cs = &checks{prev: opt.OnConnect}
		opt.OnConnect = cs.onConnect
	}
	cs.mu.Lock()
	cs.live = append(cs.live, cc)
	cs.mu.Unlock()
}

// checksOf returns the checks whose OnConnect f is, or nil when f is not
// one.
func checksOf(f func(context.Context, *redis.Conn) error) *checks {
	if f == nil || reflect.ValueOf(f).Pointer() != reflect.ValueOf((&checks{}).onConnect).Pointer() {
		return nil
	}
	// Some node's checks: the probe makes it say which.
	var cs *checks
	_ = f(context.WithValue(context.Background(), probeKey{}, &cs), nil)
	return cs
}

// OwnOnConnect returns the OnConnect that a client had before nodes added
// their connection checks to it. f is the client's OnConnect, returned as it
// is when it holds no checks. A client made from a copy of another's options
// starts from the result. It then runs the other's own OnConnect, but not the
// checks of the nodes made on the other.
func OwnOnConnect(f func(context.Context, *redis.Conn) error) func(context.Context, *redis.Conn) error {
	if cs := checksOf(f); cs != nil {
		return cs.prev
	}
	return f
}

// closing reports whether the lock client of cc's node has begun to close:
// from then on it sends only releases, which need no check.
func (cc *connCheck) closing() bool {
	select {
	case <-cc.n.cfg.Closing:
		return true
	default:
		return false
	}
}

// run checks the server of cn. It returns an error when the server is a
// replica, does not answer, or is reached by another node of the client too
// (a *SameServerError). The error closes cn, and the command that opened cn
// fails with it.
func (cc *connCheck) run(ctx context.Context, cn *redis.Conn) error {
	v, err := cc.n.cfg.Protocol.Run(ctx, cn, cc.n.cfg.Protocol.Check(cc.stateKey))
	if err != nil {
		return fmt.Errorf("connection check: %w", err)
	}
	r, err := protocol.DecodeCheck(v)
	if err != nil {
		return err
	}
	log := cc.n.cfg.Log
	switch r.Kind {
	case protocol.Changed:
		log.Warn("redlock: the node's server changed (a restart from a persisted file, a failover, or a server that was a replica since): it may lack locks it granted, so its restart guard runs",
			"node", cc.n.name, "run_id", r.ID, "guard", r.Guard)
	case protocol.NotMaster:
		if !cc.refused.Swap(true) {
			log.Error("redlock: the node's server is a replica, not a master: it grants no lock",
				"node", cc.n.name, "role", r.Detail)
		}
		return fmt.Errorf("%w (role %s)", ErrReplica, r.Detail)
	case protocol.Unchecked:
		if strings.Contains(r.Detail, "not supported") {
			// A server without replication, such as an in-memory test
			// server: it has no failover to detect.
			log.Debug("redlock: the node's server has no replication ID", "node", cc.n.name, "err", r.Detail)
		} else if !cc.unchecked.Swap(true) {
			log.Warn("redlock: cannot read the node's run_id and replication ID: a failover or a restart from a file that lacks recent locks goes undetected; allow INFO for the lock user",
				"node", cc.n.name, "err", r.Detail)
		}
	}
	// A server that another node of the client reaches too is refused,
	// so that it cannot vote twice toward a quorum. go-redis unwraps an
	// OnConnect error once: the command fails with the SameServerError.
	if err := cc.n.cfg.Servers.Seen(cc.n, r.ID); err != nil {
		return fmt.Errorf("connection check: %w", err)
	}
	return nil
}
