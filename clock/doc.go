// Package clock is the time source of redquorum and the arithmetic that turns a
// lock's TTL and the time a round took into how long the lock may be trusted.
//
// [Real] reads Go's monotonic clock, so wall-clock steps (NTP, a manual date
// change) never lengthen or shorten a measured interval. [Fake] is driven by
// tests with [Fake.Advance]. [Validity] and [Drift] implement the Redlock rule
//
//	validity = ttl − elapsed − (ttl·driftFactor + 2ms)
//
// where elapsed is measured from before the first request of a round. The
// package knows nothing about locks or Redis.
package clock
