package protocol

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestHooksFill: a hook mark is replaced by the code of every strategy up
// to the one asked for, in order, indented as the mark; a section whose
// name ends with "!" replaces the code below it; marks inside code are
// filled too; the kernel alone keeps no mark.
func TestHooksFill(t *testing.T) {
	kernel := "a\n  --@one\nb\n--@two\n--@none\nc"
	h := hooks{"one": "x\n--@inner", "two": "y", "inner": "z"}
	assert.Equal(t, "a\n  x\n  z\nb\ny\nc", h.fill(kernel))
	assert.Equal(t, "a\nb\nc", hooks{}.fill(kernel), "without a strategy, the marks go")
	assert.Equal(t, "a -- not a --@mark\n--@@not either", hooks{}.fill("a -- not a --@mark\n--@@not either"))

	// The real files: each strategy adds to the one below it.
	for s, want := range map[Strategy][]string{
		Kernel:   nil,
		Announce: {"refused", "release", "released"},
		InLine:   {"refused", "release", "released", "quiet", "acquire", "line", "forget", "waits", "granted", "next", "entry", "prefix"},
		Handoff:  {"refused", "release", "released", "quiet", "acquire", "line", "forget", "waits", "granted", "next", "entry", "prefix", "free", "drop", "mine"},
	} {
		got := strategyHooks(s)
		assert.ElementsMatch(t, want, keys(got), "strategy %d", s)
	}
	in, hand := strategyHooks(InLine), strategyHooks(Handoff)
	assert.Contains(t, hand["acquire"], in["acquire"], "the handoff's acquire code comes after the line's")
	assert.NotContains(t, hand["next"], in["next"], "the handoff's next replaces the line's")
	assert.NotContains(t, hand["release"], in["release"], "and so does its release")
}

func keys(h hooks) []string {
	var out []string
	for k := range h {
		out = append(out, k)
	}
	return out
}
