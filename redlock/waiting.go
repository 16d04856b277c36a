package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redquorum/redquorum/internal/protocol"
	"github.com/redquorum/redquorum/internal/waiting"
	"github.com/redquorum/redquorum/internal/wake"
	"github.com/redquorum/redquorum/quorum"
)

// Waiting is how [Client.Lock] waits between its rounds when the keys are
// taken. Every strategy decides grants with the same scripts on the nodes,
// so Clients with different strategies share keys safely; they differ in
// how soon and in which order waiters try again. See docs/DESIGN.md,
// "Waiting".
type Waiting int

const (
	// WaitDefault is WaitHandoff where it can serve (plain nodes, no
	// Options.Fencing) and WaitInLine elsewhere: it has the best rate and
	// fairness across processes on one busy key (see bench/README.md).
	WaitDefault Waiting = iota
	// WaitBackoff retries after a jittered, doubling delay that an
	// announcement of the key's release on the nodes (pub/sub) cuts short.
	WaitBackoff
	// WaitInLine is WaitBackoff, and the nodes keep the key's waiters in
	// line: each release names the next one, which tries at once while the
	// others give it a grace.
	WaitInLine
	// WaitHandoff is WaitInLine, and a release hands the key off on the
	// node to the next waiter whose Client still listens, without a round
	// of the waiter's. It needs plain nodes (no Cluster, no Ring) and no
	// Options.Fencing.
	WaitHandoff
)

// String returns the constant's name.
func (w Waiting) String() string {
	switch w {
	case WaitDefault:
		return "WaitDefault"
	case WaitBackoff:
		return "WaitBackoff"
	case WaitInLine:
		return "WaitInLine"
	case WaitHandoff:
		return "WaitHandoff"
	}
	return fmt.Sprintf("Waiting(%d)", int(w))
}

// checkWaiting checks Options.Waiting against the other options.
func (c *config) checkWaiting(w Waiting) error {
	switch {
	case w < WaitDefault || w > WaitHandoff:
		return fmt.Errorf("redlock: Options.Waiting %v is not one of WaitDefault, WaitBackoff, WaitInLine, WaitHandoff", w)
	case w == WaitHandoff && c.fencing:
		return fmt.Errorf("redlock: Options.Waiting %v needs the lock that a release hands off to carry no fence: it cannot be used with Options.Fencing (use WaitInLine)", w)
	}
	c.waiting = w
	return nil
}

// newStrategy returns the waiting strategy of c (internal/waiting), which
// waits for announcements on the nodes clients.
func (c *Client) newStrategy(clients []redis.UniversalClient) waiting.Strategy {
	kind := waiting.Handoff
	switch {
	case c.cfg.waiting == WaitBackoff:
		kind = waiting.Backoff
	case c.cfg.waiting == WaitInLine || c.cfg.fencing || c.sharded:
		// A fenced lock needs its round's fence, and a Cluster or a Ring
		// node no script that reaches the node's state: their waiters are
		// only named.
		kind = waiting.InLine
	}
	cfg := c.cfg
	return waiting.New(kind, waiting.Config{
		Clock: cfg.clock, Quorum: cfg.quorum,
		MinRetry: cfg.minRetry, MaxRetry: cfg.maxRetry, MaxWait: cfg.maxWait,
		Owner: cfg.owner, Prefix: cfg.prefix, NodeTimeout: cfg.nodeTimeout, Drift: cfg.drift,
		YieldWindow: cfg.yieldWindow, GraceCap: cfg.graceCap, GraceFloor: cfg.graceFloor,
		WakeIdle: cfg.wakeIdle, Proto: c.proto,
	}, (*waitHost)(c), clients)
}

// waker returns c's pub/sub connections, which its waiting strategy
// opened.
func (c *Client) waker() *wake.Waker { return c.wait.Waker() }

// waitErr returns the error for a lock call to return when its wait ended
// with err (see waiting.Wait): ErrClosed, or last, the error of its last
// round, with the context's error or the reason that MaxWait passed.
func (c *Client) waitErr(err error, last *Error) error {
	switch {
	case errors.Is(err, waiting.ErrClosed):
		return ErrClosed
	case errors.Is(err, waiting.ErrMaxWait):
		last.Reason = joinReason(last.Reason, fmt.Sprintf("gave up after Options.MaxWait %v", c.cfg.maxWait))
	default:
		last.ctx = err
	}
	return last
}

// joinReason joins two reasons, either of which may be empty, with "; ".
func joinReason(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}

// waitHost is a Client as its waiting strategy sees it (waiting.Host).
type waitHost Client

func (h *waitHost) Closing() <-chan struct{} { return h.life.closing }
func (h *waitHost) Enter() error             { return h.life.enter() }
func (h *waitHost) Exit()                    { h.life.exit() }

func (h *waitHost) Start(ctx context.Context, timeout time.Duration, fn func(ctx context.Context, node int) error) *quorum.Round {
	return (*Client)(h).start(ctx, timeout, fn)
}

func (h *waitHost) CallTimeout() time.Duration { return (*Client)(h).callTimeout() }

func (h *waitHost) ReleaseAside(name string, rel protocol.Release, last *quorum.Round, ttl time.Duration) {
	hd := handover{Token: rel.Token, TTL: ttl, Acquire: last, join: protocol.Join{Place: rel.Place}}
	if last != nil {
		hd.AcquireTimeout = (*Client)(h).callTimeout()
	}
	(*Client)(h).releaseAside(name, rel, hd)
}

func (h *waitHost) Release(ctx context.Context, node int, cmd protocol.Cmd, key string) error {
	return h.nodes[node].Release(ctx, cmd, h.cfg.nodeTimeout, key)
}

func (h *waitHost) InLine(ctx context.Context, node int, key, line, member string) (string, bool, error) {
	return h.nodes[node].InLine(ctx, key, line, member)
}
