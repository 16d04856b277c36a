// Package testhook holds switches that only tests may turn, to weaken the
// library on purpose and show that the safety checks notice (negative
// controls). Nothing outside tests may set them.
package testhook

import "sync/atomic"

// AllowMinorityQuorum lets redlock.New accept a Quorum of N/2 or less, which
// allows two holders at once. It exists so that the chaos suite can prove its
// checkers catch a violation.
var AllowMinorityQuorum atomic.Bool
