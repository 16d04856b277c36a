// Package quorum fans one call out over N nodes in parallel and decides as
// soon as the outcome is known: a quorum of nodes succeeded, or so many failed
// that a quorum can no longer be reached.
//
// A [Round] returns its decision without waiting for the slowest node, yet it
// keeps track of every call it started: [Round.Outcome] waits for one node's
// call and returns its result, so that a follow-up to that node (for example a
// release after a failed acquire) can be ordered after it, and [Round.Wait]
// waits for all of them. [Workers] runs the calls of many rounds on goroutines
// kept between rounds and waits for every call in flight ([Workers.Wait],
// [Workers.Close]). Per-node failures are gathered with go-multierror into an
// [*Error]. The package knows nothing about Redis or locks.
package quorum
