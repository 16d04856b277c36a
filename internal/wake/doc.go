// Package wake ends a lock client's retry waits early. An unlock's release
// of a marked key announces it on [protocol.ReleasedChannel] and the key.
// A client whose lock waits for a key held elsewhere subscribes to that key's
// channel on each node. It retries as soon as a node announces the release,
// instead of sleeping until its next retry.
//
// A [Waker] owns the client's pub/sub connections, one per node, opened at
// the first wait, and the subscribed keys. [Waker.Listen] begins one wait for a
// key's release, a [Wait]. A [Ledger] records the handoffs that the nodes
// announce on the client's hand channel, for the waiters that join a key's
// line to have it handed off on the node.
//
// A missed message only means waiting for the timed retry. It may be missed
// because a subscription is not yet in place or a connection broke, or
// because a holder's key simply expires. Safety does not depend on the
// messages: they only trigger a round. A key stays subscribed until nobody
// has waited for it for the idle time. The connections close once no key is
// subscribed, so that a client receives only the releases of keys it waits for.
package wake
