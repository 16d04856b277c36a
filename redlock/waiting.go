package redlock

import "fmt"

// Waiting is how [Client.Lock] waits between its rounds when the keys are
// taken. Every strategy decides grants with the same scripts on the nodes,
// so Clients with different strategies share keys safely; they differ in
// how soon and in which order waiters try again. See docs/ARCHITECTURE.md,
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
	// WaitHandoff is WaitInLine, and a release hands the key over on the
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
		return fmt.Errorf("redlock: Options.Waiting %v needs the lock that a release hands over to carry no fence: it cannot be used with Options.Fencing (use WaitInLine)", w)
	}
	c.waiting = w
	return nil
}
