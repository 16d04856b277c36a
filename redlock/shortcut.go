package redlock

import (
	"errors"

	"github.com/redquorum/redquorum/internal/protocol"
)

// The new-deployment shortcut (docs/SAFETY.md): a Client that finds every
// node of a brand-new deployment guarded marks each node's state with the
// ids it saw, then ends every guard that carries its mark (see attempt).

// newDeployment returns the requests that mark the nodes' guarded states
// when r, a round that failed with err, found a new deployment. Otherwise it
// returns nil. A round finds one when this Client has never seen a node out
// of its guard, and every node is guarded. Each node's guard began within
// the new-deployment window. Each state is unmarked, or marked with the ids
// seen now. When every node that answered was guarded, newDeployment waits
// for the others' answers, late ones included (see callTimeout and
// Client.start). It reports
// them in err.
func (c *Client) newDeployment(r *round, err error) []protocol.Shortcut {
	if err == nil || c.cfg.guard == 0 || c.inService.Load() {
		return nil
	}
	for i := range c.nodes {
		if res, done := r.calls.Result(i); done && !errors.Is(res, ErrGuarded) {
			return nil
		}
	}
	young := c.cfg.guard - c.cfg.newDeploymentWindow
	ids := make([]string, len(c.nodes))
	for i := range c.nodes {
		if !errors.Is(r.calls.Outcome(i), ErrGuarded) || r.replies[i].Wait < young {
			ids = nil
		} else if ids != nil {
			ids[i] = r.replies[i].StateID
		}
	}
	if e := (*Error)(nil); errors.As(err, &e) {
		c.fillNodes(e, r.calls, nil) // the answers waited for
	}
	if ids == nil {
		return nil
	}
	mark := protocol.StateMark(ids)
	est := make([]protocol.Shortcut, len(ids))
	for i, id := range ids {
		if m := r.replies[i].Mark; m != "" && m != mark {
			return nil // marked for other ids: a node lost its data since
		}
		est[i] = protocol.Shortcut{ID: id, Mark: mark}
	}
	return est
}

// marked reports whether r, the failed marking round of the shortcut,
// found every node still guarded with the state it asked to mark, and
// marked with its mark; it waits for every node's answer.
func (r *round) marked() bool {
	for i := range r.c.nodes {
		rep := &r.replies[i]
		if !errors.Is(r.calls.Outcome(i), ErrGuarded) || rep.StateID != r.est[i].ID || rep.Mark != r.est[i].Mark {
			return false
		}
	}
	return true
}

// newDeploymentMark reports whether m, the mark of a guarded state, is one
// that a Client's new-deployment shortcut set: the state is a new
// deployment's, whose guard the shortcut is ending, not a node's that lost
// its data. A state made after a loss has no mark, and the connection
// check marks the guard it starts with [protocol.CheckMark].
func newDeploymentMark(m string) bool { return m != "" && m != protocol.CheckMark }
