// Package internal holds what the redquorum library imports and users must
// not depend on: the node protocol (internal/protocol), one lock node
// (internal/node), the local per-key queue of a client's callers
// (internal/queue), release announcements (internal/wake), the waiting
// strategies between a lock call's rounds (internal/waiting), lock tokens
// and retry delays (internal/retry), hash slots (internal/hashslot) and a
// value allocated together with its slice (internal/alloc). Tools for tests
// and benchmarks live apart, in internal/testkit, which the library never
// imports.
package internal
