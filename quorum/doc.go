// Package quorum fans one call out over N nodes in parallel and decides as
// soon as the outcome is known: a quorum of nodes succeeded, or so many failed
// that a quorum can no longer be reached.
//
// A [Round] returns its decision without waiting for the slowest node, yet it
// keeps track of every call it started: [Round.Done] tells when one node's call
// has finished, so that a follow-up to that node (for example a release after a
// failed acquire) can be ordered after it, and [Round.Wait] waits for all of
// them. Per-node failures are gathered with go-multierror into an [*Error].
// The package knows nothing about Redis or locks.
package quorum
