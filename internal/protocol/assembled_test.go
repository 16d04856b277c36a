package protocol

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateAssembled = flag.Bool("update", false, "write the assembled scripts to "+assembledDir)

// assembledDir holds each script as the nodes run it, with the hooks of
// its waiting strategy filled in: what a reader of the nodes' side reads.
const assembledDir = "assembled"

// assembled returns the scripts that Clients send, by file name: the
// acquire and the release of each waiting strategy that a Client uses
// (Options.Waiting WaitBackoff is Announce, WaitInLine InLine, WaitHandoff
// Handoff; a fenced Client waits in line), and the scripts that no
// strategy changes.
func assembled() map[string]string {
	out := map[string]string{}
	for _, s := range []struct {
		name     string
		strategy Strategy
		fenced   bool
	}{{"backoff", Announce, false}, {"inline", InLine, false}, {"handoff", Handoff, false}, {"fenced", InLine, true}} {
		a, r, e, f, c := New(0, s.fenced, s.strategy, "").Sources()
		out["acquire-"+s.name+".lua"], out["release-"+s.name+".lua"] = a, r
		out["extend.lua"], out["fence.lua"], out["check.lua"] = e, f, c
	}
	return out
}

// TestAssembledScripts: the files in assembled/ are the scripts as sent
// (go test ./internal/protocol -run TestAssembledScripts -update writes
// them), so that a change of a hook shows in the script it changes.
func TestAssembledScripts(t *testing.T) {
	want := assembled()
	if *updateAssembled {
		require.NoError(t, os.RemoveAll(assembledDir))
		require.NoError(t, os.MkdirAll(assembledDir, 0o755))
		for name, src := range want {
			require.NoError(t, os.WriteFile(filepath.Join(assembledDir, name), []byte(src+"\n"), 0o644))
		}
	}
	files, err := filepath.Glob(filepath.Join(assembledDir, "*.lua"))
	require.NoError(t, err)
	assert.Len(t, files, len(want), "one file per script: %v", files)
	for name, src := range want {
		got, err := os.ReadFile(filepath.Join(assembledDir, name))
		if !assert.NoError(t, err, "run: go test ./internal/protocol -run TestAssembledScripts -update") {
			continue
		}
		assert.Equal(t, src+"\n", string(got), "%s is not the script as sent: go test ./internal/protocol -run TestAssembledScripts -update", name)
	}
	for _, f := range files {
		_, ok := want[filepath.Base(f)]
		assert.True(t, ok, "%s is no script a Client sends", f)
	}
	lines := strings.Count(want["acquire-handoff.lua"], "\n") + 1
	t.Logf("the default acquire as sent: %d lines", lines)
}
