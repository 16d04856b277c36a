// Package locktest tests code that uses a distributed lock against real
// Redis nodes that fail. It starts the nodes and injects faults into them on
// a random schedule. It records the critical sections of the code under
// test, and checks that no two of them held one lock at once.
//
// # Nodes
//
// [Start] runs N independent Redis masters as native redis-server
// processes, so no Docker is needed. Each runs behind an in-process TCP
// proxy on 127.0.0.1. Start stops them in t.Cleanup, also when the test
// fails. On Linux the kernel kills them when the test binary is killed.
// Clients dial [Cluster.Addrs]. The faults, by node:
//
//   - [Node.Kill] and [Node.Start]: a crash (SIGKILL) and a start without
//     the data, as without persistence;
//   - [Node.Restart] with or without the data (a snapshot written first);
//   - [Node.Pause] and [Node.Unpause]: SIGSTOP and SIGCONT;
//   - [Node.Partition] and [Node.Heal]: traffic stalls, from every client;
//     a client partition cuts one [Cluster.View];
//   - [Node.SetLatency] and [Node.SetLatencies]: delay each way;
//   - [Node.Failover]: a failover to a replica that lacks the newest writes,
//     for nodes started [WithReplicas].
//
// The Docker nodes of the nested module locktest/rig offer the same faults
// but the restart with data (Failover with rig.WithReplicas). Each is a
// [Target], so the same fault schedule runs on them. Neither backend runs
// Sentinel: a failover is the test's.
//
// # Faults on a schedule
//
// A [Schedule] injects faults at random into a minority of the nodes at a
// time. Its seed makes it reproducible. [Schedule.Start] logs the seed when
// the test fails, and setting Schedule.Seed to it draws the same faults.
//
// # Recording and checking
//
// A [Recorder] collects the client's attempts. Call [Recorder.Start] before
// Lock, then [Span.Failed], or [Span.Obtained] with the fencing token. After
// Obtained, call [Span.End] with the lock's validity end before Unlock.
//
// [Check] runs two checkers. [CheckOverlaps] finds two holds of one key at
// once, in real time, unless both are read holds ([Recorder.StartShared]).
// [CheckFences] finds a fencing token that is not above that of an earlier
// hold. [CheckSemaphore] runs [CheckLimit] instead, which finds more than k
// holds of one key inside their validity at once.
//
// The nested module locktest/linearize checks linearizability with
// porcupine: of the lock itself, or of a register or counter that the lock
// protects. It is a module of its own, so this package adds no dependency
// to the module.
//
// [Verify] and [VerifySemaphore] fail the test on a violation. They name an
// SVG timeline of the run, written to $LOCKTEST_DIR or the temporary
// directory. It shows the holds per client, the faults per node, and each
// violation in red.
//
// # Assumptions
//
// Times are wall-clock readings, comparable between processes of one
// machine while the system clock is not stepped. The lock's own assumptions
// must hold. At most a minority of the nodes is faulted at once, the
// schedule's default. A node that loses its data stays down longer than the
// longest TTL (Schedule.KillDowntime), unless the lock has a restart guard.
package locktest
