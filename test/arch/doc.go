// Package arch checks, as ordinary tests that CI runs, that the library's
// source keeps the shape the architecture promises, because a rule that no
// test enforces erodes one convenient exception at a time. Library code (the
// non-test files of redlock, quorum, clock and internal, except the test and
// bench tools in internal/testkit) declares no package-level variables other
// than sentinel errors, //go:embed sources and `var _` assertions, and no init
// functions; no function exceeds 60 lines unless it is mostly a table;
// dependencies point one way (quorum knows nothing about go-redis, clock
// nothing about this module, internal nothing about redlock, the test tools
// in internal/testkit included, and no library package imports
// internal/testkit or test); no non-test .go file in redlock
// or internal (the tools included) exceeds 400 lines, and the kernel scripts
// keep their limits (acquire.lua 120 lines, release.lua 50); and every
// repository path and every Go identifier (`pkg.Name`, `pkg.Type.Member`,
// `Type.Member`) that docs/ARCHITECTURE.md names in backquotes exists; and
// every script in internal/protocol matches the checksum in
// model/scripts.sum that the model was last reviewed against (or is listed as
// outside the model). Files
// being split wait in pendingSplit, which only shrinks. The checks parse the
// source with go/parser, so they need neither a build nor Redis, and each one
// also runs on small fixtures that break it, so a check that stops seeing
// violations fails too.
package arch
