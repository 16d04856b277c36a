// Package waiting is how a lock client waits between its rounds when the
// keys are taken: its waiting strategies (Options.Waiting). The lock rounds
// know nothing of waiting. A Client holds one [Strategy], which gives each
// lock call that must wait a [Wait]. That Wait tells the next round what to
// say to the nodes ([Join]), sleeps between the rounds, and may hand the
// call a lock that the nodes handed off ([Hand]). A [Waiter] is the part
// that every strategy shares: the backoff, the give-up, the jitter and the
// one loop that listens for releases (internal/wake).
//
// The strategies, each over the one before:
//   - backoff (backoff.go): retry after a jittered backoff, cut short when
//     a node announces the key's release;
//   - inLine (inline.go): and join the key's line on the nodes, where a
//     release names the next waiter, which tries at once;
//   - handoff (handoff.go, insure.go): and let a release hand the key off
//     on the node to the next waiter whose Client still listens.
//
// Every strategy decides grants with the same scripts on the nodes, and a
// strategy's code on the nodes never decides a grant, so Clients with
// different strategies share keys safely. The package asks its Client
// for what it needs through [Config] and [Host], and never imports the
// lock's package: see docs/ARCHITECTURE.md and docs/WAITING.md.
package waiting
