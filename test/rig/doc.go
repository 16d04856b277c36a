// Package rig starts real Redis servers in Docker for tests and injects
// faults into them.
//
// [Start] runs N independent Redis 7 masters, without persistence, from the
// locally built image [Image] on a Docker network private to the test, and
// puts an in-process TCP [Proxy] on 127.0.0.1 in front of each. Clients use
// [Node.Addr], the proxy's address, so that a test can crash a node
// ([Node.Kill], [Node.Start], [Node.Restart]: the node comes back empty),
// stall its process ([Node.Pause]), cut it off the network ([Node.Partition])
// or slow it down ([Node.SetLatency]). Everything is removed in t.Cleanup,
// also when the test fails; a node's container also stops by itself once the
// test's deadline has passed, and later runs remove what a killed test binary
// left behind.
//
// When Docker is not reachable, Start skips the test, or fails it when the
// environment variable CI is "true": CI must never skip. When the image is
// missing, Start builds it with scripts/redis-image.sh, which needs no
// registry.
//
// The proxies live in the test process, so a second process (for example a
// re-executed test binary) can reach the nodes through [Cluster.Env] and
// [AddrsFromEnv] for as long as the test runs.
package rig
