package arch

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The scripts the model checks, and their recorded checksums.
const (
	scriptsDir = "internal/protocol"
	scriptsSum = "model/scripts.sum" // sha256sum's format: hash, two spaces, path
	safetyDoc  = "docs/SAFETY.md"    // its table maps each script to its model step
	sumCommand = "cd test && go test ./arch/ -run TestModelScripts -update"
)

// unmodelled are the scripts the model leaves out on purpose, with why.
func unmodelled() map[string]string {
	return map[string]string{
		"elect.lua": "the election's record, a layer that never decides a grant",
	}
}

var update = flag.Bool("update", false, "record the current checksums of the modelled scripts in "+scriptsSum)

// scriptSums returns the SHA-256 of each script in scriptsDir of fsys, by
// path, except those unmodelled.
func scriptSums(fsys fs.FS) (map[string]string, error) {
	names, err := fs.Glob(fsys, scriptsDir+"/*.lua")
	if err != nil {
		return nil, err
	}
	// The scripts as sent, with their strategies' hooks filled in
	// (internal/protocol/assembled_test.go).
	sent, err := fs.Glob(fsys, scriptsDir+"/assembled/*.lua")
	if err != nil {
		return nil, err
	}
	names = append(names, sent...)
	sums := map[string]string{}
	for _, p := range names {
		if _, skip := unmodelled()[path.Base(p)]; skip {
			continue
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, err
		}
		h := sha256.Sum256(b)
		sums[p] = hex.EncodeToString(h[:])
	}
	return sums, nil
}

// formatSums writes sums as sha256sum does, sorted by path.
func formatSums(sums map[string]string) string {
	var b strings.Builder
	for _, p := range slices.Sorted(func(yield func(string) bool) {
		for p := range sums {
			if !yield(p) {
				return
			}
		}
	}) {
		fmt.Fprintf(&b, "%s  %s\n", sums[p], p)
	}
	return b.String()
}

// staleScripts compares the scripts of fsys with the checksums recorded in
// scriptsSum, and returns one finding for each script that changed, is not
// recorded, or is recorded but gone.
func staleScripts(fsys fs.FS) ([]finding, error) {
	sums, err := scriptSums(fsys)
	if err != nil {
		return nil, err
	}
	recorded, err := fs.ReadFile(fsys, scriptsSum)
	if err != nil {
		return nil, err
	}
	var out []finding
	seen := map[string]bool{}
	for n, line := range strings.Split(strings.TrimRight(string(recorded), "\n"), "\n") {
		sum, p, ok := strings.Cut(line, "  ")
		if !ok {
			out = append(out, finding{pos: token.Position{Filename: scriptsSum, Line: n + 1}, name: line, msg: "not \"sha256  path\": run " + sumCommand})
			continue
		}
		seen[p] = true
		switch now, exists := sums[p]; {
		case !exists:
			out = append(out, finding{pos: token.Position{Filename: scriptsSum, Line: n + 1}, name: p,
				msg: fmt.Sprintf("recorded but is not a modelled script: remove it from the model's table in %s, then run %s", safetyDoc, sumCommand)})
		case now != sum:
			out = append(out, finding{pos: token.Position{Filename: scriptsSum, Line: n + 1}, name: p,
				msg: fmt.Sprintf("changed since the model was last reviewed against it: review its model step (%s, \"Model steps\"; model/*.pml) and update the model, then run %s", safetyDoc, sumCommand)})
		}
	}
	for p := range sums {
		if !seen[p] {
			out = append(out, finding{pos: token.Position{Filename: scriptsSum, Line: len(seen) + 1}, name: p,
				msg: fmt.Sprintf("not in %s: add its model step (%s, \"Model steps\"; model/*.pml) or list it in unmodelled, then run %s", scriptsSum, safetyDoc, sumCommand)})
		}
	}
	slices.SortFunc(out, func(a, b finding) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// TestModelScripts fails when a kernel, strategy or layer script changes
// without its step in the model (model/redlock.pml, model/handoff.pml,
// model/layer.pml) being reviewed: model/scripts.sum records the checksum
// of each script the model was last checked against. With -update it
// records the current ones.
func TestModelScripts(t *testing.T) {
	root, _ := moduleRoot(t)
	fsys := os.DirFS(root)
	if *update {
		sums, err := scriptSums(fsys)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(root, scriptsSum), []byte(formatSums(sums)), 0o644))
	}
	findings, err := staleScripts(fsys)
	require.NoError(t, err, "%s must exist", scriptsSum)
	report(t, findings)
}

func TestModelScriptsFixtures(t *testing.T) {
	const acquire, extend = "-- acquire\nreturn 0\n", "-- extend\nreturn 1\n"
	base := func() fstest.MapFS {
		fsys := fstest.MapFS{
			"internal/protocol/acquire.lua": {Data: []byte(acquire)},
			"internal/protocol/extend.lua":  {Data: []byte(extend)},
			"internal/protocol/elect.lua":   {Data: []byte("-- not modelled\n")},
		}
		sums, err := scriptSums(fsys)
		require.NoError(t, err)
		fsys[scriptsSum] = &fstest.MapFile{Data: []byte(formatSums(sums))}
		return fsys
	}
	fsys := base()
	assert.NotContains(t, string(fsys[scriptsSum].Data), "elect.lua", "an unmodelled script is not recorded")
	tests := []struct {
		name   string
		change func(fstest.MapFS)
		want   []string // the start of each finding
	}{
		{"unchanged", func(fstest.MapFS) {}, nil},
		{"unmodelled script changed", func(m fstest.MapFS) { m["internal/protocol/elect.lua"].Data = []byte("-- changed\n") }, nil},
		{"script changed", func(m fstest.MapFS) {
			m["internal/protocol/acquire.lua"].Data = []byte(acquire + "-- one more line\n")
		}, []string{"model/scripts.sum:1: internal/protocol/acquire.lua: changed since the model was last reviewed"}},
		{"new script", func(m fstest.MapFS) {
			m["internal/protocol/renew.lua"] = &fstest.MapFile{Data: []byte("return 1\n")}
		}, []string{"model/scripts.sum:3: internal/protocol/renew.lua: not in model/scripts.sum"}},
		{"script gone", func(m fstest.MapFS) { delete(m, "internal/protocol/extend.lua") },
			[]string{"model/scripts.sum:2: internal/protocol/extend.lua: recorded but is not a modelled script"}},
		{"malformed line", func(m fstest.MapFS) {
			m[scriptsSum].Data = append(m[scriptsSum].Data, "garbage\n"...)
		}, []string{"model/scripts.sum:3: garbage: not \"sha256  path\""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fsys := base()
			tc.change(fsys)
			findings, err := staleScripts(fsys)
			require.NoError(t, err)
			require.Len(t, findings, len(tc.want), "%v", findings)
			for i, f := range findings {
				assert.True(t, strings.HasPrefix(f.String(), tc.want[i]), "%q does not start with %q", f.String(), tc.want[i])
				assert.Contains(t, f.String(), sumCommand, "the finding tells how to record the checksums")
			}
		})
	}
	_, err := staleScripts(fstest.MapFS{"internal/protocol/acquire.lua": {Data: []byte(acquire)}})
	assert.ErrorIs(t, err, fs.ErrNotExist, "a missing %s is an error", scriptsSum)
}
