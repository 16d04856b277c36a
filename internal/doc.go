// Package internal holds what redquorum's packages share and users must not
// depend on: the Lua scripts each node runs (internal/scripts), lock tokens and
// retry delays with jitter (internal/retry), a value allocated together with
// its slice (internal/alloc), and test helpers.
package internal
