// Package internal holds what redquorum's packages share and users must not
// depend on: the Lua scripts each node runs (internal/scripts), lock tokens and
// retry delays with jitter (internal/retry), and test helpers.
package internal
