// Package quorum runs one call on N nodes in parallel and decides at a quorum.
// A round is decided as soon as a quorum of nodes succeeded, or as soon as so
// many failed that a quorum is out of reach.
//
// A [Round] decides without waiting for the slowest node, yet it tracks every
// call it started. [Round.Outcome] waits for one node's call and returns its
// result. This orders a follow-up to that node after the call, such as a
// release after a failed acquire. [Round.Wait] waits for all of the calls.
// [Workers] runs the calls of many rounds on goroutines kept between rounds,
// and [Workers.Wait] and [Workers.Close] wait for every call in flight.
// Per-node failures are gathered with go-multierror into an [*Error].
// The package knows nothing about Redis or locks.
package quorum
