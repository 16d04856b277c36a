// Package rig starts real Redis servers in Docker for tests and injects
// faults into them: the Docker backend of locktest, in a module of its own
// so that Docker's client stays out of the builds that use only native
// nodes. Its [Node] is a locktest.Target, so a locktest.Schedule runs on it
// as on locktest's native nodes, Failover included (with [WithReplicas]).
//
// [Start] runs N independent Redis 7 masters, without persistence, from the
// locally built image [Image] on a Docker network private to the test, and
// puts an in-process TCP [Proxy] on 127.0.0.1 in front of each. Clients use
// [Node.Addr], the proxy's address, so that a test can crash a node
// ([Node.Kill], [Node.Start], [Node.Restart]: the node comes back empty),
// stall its process ([Node.Pause]), cut it off the network ([Node.Partition])
// or slow it down ([Node.SetLatency]).
//
// With [WithReplicas], each node also has a replica: a second container on
// the same network that replicates from the master by container name, and
// that clients do not reach. [Node.Failover] promotes the replica while
// clients keep writing to the master for a lag, kills the master, points the
// proxy at the promoted replica and starts the old master again, empty, as
// the new replica: the writes of the lag are lost, as after a failover to an
// asynchronous replica, and the next Failover swaps the two back. The other
// faults act on the current master. [Node.ReplicaAddr] and
// [Node.WaitReplicated] let a test read what the replica has.
//
// Everything is removed in t.Cleanup, also when the test fails; a node's
// containers also stop by themselves once the test's deadline has passed,
// and later runs remove what a killed test binary left behind.
//
// When Docker is not reachable, Start skips the test, or fails it when the
// environment variable CI is "true": CI must never skip. When [Image] is
// missing, Start builds it with scripts/redis-image.sh of this repository,
// which needs no registry; outside the repository, use [WithImage], for
// example with "redis:7".
//
// The proxies live in the test process, so a second process (for example a
// re-executed test binary) can reach the nodes through [Cluster.Env] and
// [AddrsFromEnv] for as long as the test runs.
package rig
