// Package chaos is the chaos suite of redquorum: many contenders in several
// OS processes compete for a few keys on real Redis masters (locktest/rig)
// while a fault schedule kills, pauses, partitions, slows and (with replicas) fails
// over the lock nodes, and the recorded history is checked for two holders at
// once.
//
// # What is recorded
//
// Every contender records each attempt to lock (a locktest.Attempt). A
// successful one is a hold: Call is when Lock was called, Obtained when it returned the lock,
// and End = min(start of Unlock, Lock.Until()) after the last successful
// Extend. Holders stop using the lock at Until: they write to the shared
// resource only while more than a safety margin of validity is left. A failed
// attempt is recorded with its call and return times.
//
// Times are wall-clock time.Time.UnixNano readings taken in different
// processes on one machine, so they are comparable as long as the system
// clock is not stepped during a run (the client itself measures validity on
// the monotonic clock; Until's wall reading is its start's wall reading plus
// the validity). A clock step during a run can produce a false report, never
// hide a real overlap longer than the step.
//
// The fault schedule, the history's type and its checkers come from the
// public test kit: locktest.Schedule runs on the rig's nodes, and a run with
// violations also writes locktest's timeline of holds, faults and overlaps.
//
// # The checkers
//
// locktest.CheckOverlaps is a plain interval check: within one key, sorted
// by Obtained, no hold may begin before an earlier hold's End.
//
// linearize.CheckLock hands the same history to porcupine (a
// linearizability checker) with the model of a lock whose acquire may fail spuriously: the
// state is the current holder or nobody; an acquire that succeeded (interval
// [Call, Obtained]) needs the lock free and takes it; a failed acquire is
// always allowed and changes nothing; a release (the point End) needs the
// releasing hold to be the holder and frees the lock. The history is
// partitioned by key.
//
// The oversell scenario makes overlap visible on a shared resource as well: a
// Redis server outside the lock nodes, never faulted, holds a stock of S per
// key. A holder reads the stock, sleeps a little, and in one MULTI writes
// stock−1 and increments a sold counter. Two holders that overlap both read
// the same stock, so at the end sold + stock = S fails. The stock never
// goes below zero.
//
// Both checkers are shown to fail on a misconfigured run (two processes whose
// Clients have different node lists, 0–2 and 2–4 of five, so that each can
// gather a majority of its own list on a pair the other never touches): see
// TestNegativeControl. A checker that cannot fail proves nothing.
//
// # Replicated runs and failovers
//
// With Options.Replicated, every lock node has a replica (rig.WithReplicas),
// and the schedule can inject the Failover fault: the node's replica is
// promoted while the contenders keep locking on the old master for a random
// lag, then the old master is killed and the node's address moves to the
// promoted replica, which lacks every grant, extension and release of the
// lag. Nothing but the connection check (check.lua) tells the client: a
// new connection finds a server process (run_id) other than the one
// recorded in the node's state and starts the node's restart guard. TestChaosReplicated runs
// every kind of fault with failovers on a replicated deployment and must be
// clean; its leftover check also lists the keys of each replica once it has
// caught up with its master. TestFailoverChaos shows that the scenario does
// hand out held locks when the guard is off (the negative control) and that
// the guard prevents it.
//
// # Mixed deployments
//
// Safety must not depend on how a Client waits, nor on its release. With
// Options.Waiting, the processes of a run wait with different strategies
// (redlock.Options.Waiting); with Options.Previous, some of them run the
// chaos test binary of the previous release, which the first run that needs
// it builds from the repository (git archive of the commit, then go test
// -c). TestChaosHotKey mixes both on one key.
//
// # Elections
//
// [RunElection] runs several candidate processes in one election
// (redlock.Election) under the same fault schedule (locktest.Schedule), and
// pauses the leader's process when it is not the test's own (SIGSTOP) for
// one to three TTLs, so that leaderships run out while their leader sleeps.
// A leader writes its term to a store on the resource node that refuses a
// term lower than the highest it took, and only while Done is open and its
// validity has a margin left. Each [Tenure] (a locktest.Attempt with its
// term) runs from Campaign's return to the earlier of Resign and the
// leadership's last validity. [checkElection] requires that no two tenures
// overlap (locktest.Check; a run with an overlap writes its timeline), that
// terms increase from tenure to tenure, and that no write was decided
// outside its tenure; a process also follows the election with Observe,
// whose reported terms must not go down. The negative control,
// TestChaosElectionNegativeControl, has careless candidates that skip the
// checks before acting: their writes after a pause are decided outside
// their tenure, and the store refuses them or takes them stale.
//
// # Semaphores and read-write locks
//
// [RunPermits] runs two processes of contenders on one redlock.Semaphore
// or redlock.RWMutex under the fault schedule, failovers included, and
// pauses the second process (SIGSTOP) while it holds, for one to three
// TTLs, so that its holds run out while it sleeps. A hold is recorded as for a
// lock, a reader's as Shared. locktest.CheckLimit requires that no more
// than the semaphore's limit of holds be inside their validity at any
// instant; locktest.CheckOverlaps, that no writer's hold overlap any other
// hold. TestChaosSemaphoreRW runs both phases and their negative controls
// on one rig: naiveSemaphore, which counts holders on each node and needs
// a majority (three holders can each win a different majority), with
// faults and on three nodes without; readers that take a slot of another
// semaphore, which no writer takes; and writers that lock the writer key
// with the kernel alone, skipping the nodes' check for reader slots.
//
// # Assumptions of the suite
//
// The lock's assumptions (README) hold during the run: at most a minority of
// the lock nodes is faulted at once, and a node that loses its data (Kill,
// which restarts it without persistence) stays down for longer than the
// longest TTL before it comes back (Options.KillDowntime). A test that wants
// a node to come back empty within a hold sets KillDowntime below the TTL.
// A failover breaks that assumption on purpose: the promoted replica answers
// at once, and only the restart guard keeps the run safe.
package chaos
