package waiting

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redquorum/redquorum/internal/protocol"
)

// insure is told that the timer of a waiter in line for a handoff fired.
// That timer is insurance: for a handoff or an announcement that was lost,
// an entry that a node lost, or a key that expired or was freed without a
// handoff. A later round would mend those, but it also replaces the
// waiter's entry under a new token on every node, and a release that meets
// that change halfway hands the key off to the two tokens on different
// nodes, neither with a quorum. So when no node handed the key off to the
// current round, the waiter first reads the nodes (see readLine), which
// changes nothing there, and sends a round only when the read finds
// something to mend. A read that finds a handoff or a release to the
// current round on its way gives it a grace; when it is still on its way
// at the next read, it was lost. A read costs each node a GET and a
// ZSCORE; a later round, a script that scans the line.
func (hw *handWait) insure() <-chan time.Time {
	cur := hw.current()
	if cur == "" || hw.h.ledger.HandedNodes(cur) != 0 {
		return nil
	}
	cfg := &hw.h.cfg
	switch hw.readLine(cur) {
	case lineWaits:
		hw.moving = false
		hw.reads++
		return cfg.Clock.After(hw.delay(0))
	case lineMoving:
		if !hw.moving {
			hw.moving = true
			return cfg.Clock.After(min(hw.iw.grace(), cfg.YieldWindow))
		}
	}
	hw.moving = false
	return nil
}

// lineRead is what readLine found.
type lineRead uint8

const (
	lineWaits  lineRead = iota // every node that answered holds the key for another, with the round in line
	lineMoving                 // and for one or more, the key was handed off to the round, or granted to it
	lineMend                   // a node holds the key for nobody, or lost the round's entry
)

// readLine reads the key and the entry in line of the waiter's round with
// token cur on every node, and waits for the answers. A node that does
// not answer in time counts for nothing: a round would not reach it
// either. Its call goes on (see quorum.Round.Settle); an answer that
// comes before the flags are read counts as a timely one. Reads change
// nothing on the nodes, and what they find never decides who holds the
// key; a round does.
func (hw *handWait) readLine(cur string) lineRead {
	w, h := &hw.iw.w, hw.h
	if err := h.host.Enter(); err != nil {
		return lineWaits // closed: the wait ends with ErrClosed
	}
	defer h.host.Exit()
	line := protocol.LineKey(h.cfg.Prefix, w.keys[0])
	member := protocol.HandEntry(hw.iw.place, cur, hw.ttl, h.channel)
	var found [3]atomic.Bool
	r := h.host.Start(w.ctx, h.host.CallTimeout(), func(ctx context.Context, i int) error {
		v, queued, err := h.host.InLine(ctx, i, hw.stored, line, member)
		if err != nil {
			return err
		}
		switch h, _ := protocol.Holding(v); {
		case h == cur || h == protocol.HandPrefix+cur:
			found[lineMoving].Store(true)
		case !queued || h == "" || strings.HasPrefix(h, protocol.TombstonePrefix):
			found[lineMend].Store(true)
		}
		return nil
	})
	r.Settle()
	switch {
	case found[lineMend].Load():
		return lineMend
	case found[lineMoving].Load():
		return lineMoving
	}
	return lineWaits
}
