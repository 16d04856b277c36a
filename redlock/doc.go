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
// # Assumptions
//
// Two clients never hold one lock within its validity provided that: the
// nodes are independent masters (no replication between them, no failover
// that promotes a replica with a stale copy); a node does not forget a key
// before its TTL passes (it runs with persistence, or stays out after a
// restart for at least the longest TTL); clocks on the client and the nodes
// run at rates that differ by less than DriftFactor; and the holder stops
// relying on the lock at [Lock.Until], which it cannot do through a process
// pause it does not notice, so a resource that must never see two writers
// also needs fencing.
package redlock
