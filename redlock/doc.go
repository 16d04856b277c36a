// Package redlock is a distributed lock over N independent Redis masters:
// the Redlock algorithm, built to stay safe when nodes fail, stall or lose
// their data, and to cost one round trip to the quorum-th fastest node.
//
// A [Client] holds the nodes and the configuration; [Client.Lock] (retrying)
// and [Client.TryLock] (one round) return a [Lock], which is released with
// [Lock.Unlock] and kept with [Lock.Extend].
//
// # The algorithm
//
// A round sends, in parallel to every node, a script that sets key = token
// with a TTL only if the key is free or already holds this token. The lock is
// held if a quorum (by default N/2+1) granted it and the validity
//
//	ttl − elapsed − (ttl·DriftFactor + 2ms)
//
// is still positive, where elapsed is measured on a monotonic clock from before
// the first request. Otherwise the round releases every node that may hold the
// token, including nodes that did not answer in time (their SET may have
// landed), each after its answer or timeout. Unlock and Extend run scripts that
// act only if the key still holds the token.
//
// [Client.LockMany] and [Client.TryLockMany] lock several keys together:
// each node grants all of them or none in one script, and the quorum is
// counted over nodes.
//
// # Restart guard
//
// A node that restarts without persistence forgets the locks it granted, so
// a second client could win a quorum while the first still holds the lock.
// Each node therefore keeps a state key without expiry. A node whose state
// is missing has lost its data. It refuses to grant for
// Options.RestartGuard (1 minute by default, and at least every TTL), from
// its first lock or extend request after the loss. A brand-new deployment, where a
// round finds every node's guard just begun, skips the wait. See
// [ErrGuarded].
//
// # Fencing
//
// With Options.Fencing every lock carries [Lock.Fence], a number that
// strictly increases from one holder of a key to the next, for resources
// that must turn away a holder paused beyond its validity. It costs a
// second round trip when locking.
//
// # Leader election
//
// [Client.Election] elects one leader among the callers of
// [Election.Campaign] in any number of processes. The leader holds a fenced
// lock that Do's extensions keep. A [Leadership] carries its term, the
// lock's fence. It ends as soon as the lock can no longer be shown to be
// held.
// [Election.Leader] and [Election.Observe] report the leader that a quorum
// of nodes agree on.
//
// # Observing
//
// Options.Observer receives an event for every operation (its outcome,
// duration, waits and each round's votes with each node's latency), for
// Do's extensions and for the changes of a node's state; see [Observer].
// The nested modules contrib/prometheus and contrib/otel turn the events
// into Prometheus metrics and OpenTelemetry spans and metrics. Without an
// Observer no event is built. The library logs through Options.Logger,
// at Warn only for what needs a change (see [Options]), and at Debug for
// releases that failed; the healthy path logs nothing.
//
// # Assumptions
//
// Two clients never hold one lock within its validity, provided that:
//
//   - The nodes are independent, with no replication between them. A node
//     may be a replicated group whose failover promotes a replica. That
//     replica then refuses locks for RestartGuard (see [New]).
//   - Every client of a lock uses the same nodes with a majority quorum.
//   - A node loses a key before its TTL passes only together with its
//     state key, or by becoming another server. The first is a restart
//     without persistence, FLUSHALL or FLUSHDB. Lock nodes that set
//     maxmemory use maxmemory-policy noeviction, since eviction can drop
//     one key and keep the other. The second is a failover, or a restart
//     from a persisted file.
//   - Not every node loses its data within one TTL (see [ErrGuarded]).
//   - Every client of a deployment uses the same RestartGuard.
//   - Clocks on the client and the nodes run at rates that differ by less
//     than DriftFactor.
//   - The holder stops relying on the lock at [Lock.Until]. It cannot do so
//     through a process pause it does not notice. So a resource that must
//     never see two writers also needs fencing.
//
// docs/SAFETY.md states each guarantee with the assumptions it needs, its
// proof, the model that checks it and the tests on real servers that
// exercise it. The guarantees are mutual exclusion, fences, the restart
// guard, failover detection, the new-deployment shortcut, tombstones, the
// handoff on the node, and no false lockout.
package redlock
