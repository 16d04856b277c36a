package arch

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// cliModule is what cliModuleProblems reads of cmd/redlock/go.mod (go mod
// edit -json).
type cliModule struct {
	Module  struct{ Path string }
	Require []struct{ Path, Version string }
	Replace []struct{ Old struct{ Path string } }
}

// commitFacts answers, for a commit hash prefix, whether the repository
// has that commit, its time as a pseudo-version writes it (UTC,
// yyyymmddhhmmss), and whether the commit holds cmd/redlock/go.mod.
type commitFacts func(hash string) (ok bool, time string, nested bool)

// cliModuleProblems returns what is wrong with the command's module, m,
// for `go install <module>/cmd/redlock@<version>`: it must be the module
// <module>/cmd/redlock, have no replace directive (go install refuses
// them), and require the library at a pseudo-version of a commit of this
// repository (its time and hash) that holds cmd/redlock/go.mod, so that
// the library version it builds with does not also provide the package.
// facts is nil when the repository's history is not at hand.
func cliModuleProblems(m cliModule, module string, facts commitFacts) []string {
	var out []string
	if want := module + "/cmd/redlock"; m.Module.Path != want {
		out = append(out, fmt.Sprintf("module %q, want %q", m.Module.Path, want))
	}
	for _, r := range m.Replace {
		out = append(out, fmt.Sprintf("replace directive for %s: go install ...@version refuses it (cmd/redlock/go.work replaces instead)", r.Old.Path))
	}
	version := ""
	for _, r := range m.Require {
		if r.Path == module {
			version = r.Version
		}
	}
	parts := strings.Split(version, "-")
	switch {
	case version == "":
		return append(out, "does not require "+module)
	case len(parts) != 3 || parts[0] != "v0.0.0" || len(parts[1]) != 14 || len(parts[2]) != 12:
		return append(out, fmt.Sprintf("requires %s %s: want a pseudo-version v0.0.0-yyyymmddhhmmss-<12 hex> of a commit of this repository", module, version))
	case parts[1] == "00010101000000":
		return append(out, fmt.Sprintf("requires %s %s, a placeholder: go install would fail", module, version))
	case facts == nil:
		return out
	}
	ok, at, nested := facts(parts[2])
	switch {
	case !ok:
		out = append(out, fmt.Sprintf("requires %s %s: no commit %s in this repository", module, version, parts[2]))
	case at != parts[1]:
		out = append(out, fmt.Sprintf("requires %s %s: commit %s is of %s (UTC), not %s", module, version, parts[2], at, parts[1]))
	case !nested:
		out = append(out, fmt.Sprintf("requires %s %s: that commit has no cmd/redlock/go.mod, so both modules would provide the package", module, version))
	}
	return out
}

// TestCLIModule: cmd/redlock is a module of its own that go install can
// build at a version (see cliModuleProblems).
func TestCLIModule(t *testing.T) {
	root, module := moduleRoot(t)
	out, err := exec.Command("go", "mod", "edit", "-json", filepath.Join(root, "cmd/redlock/go.mod")).Output()
	require.NoError(t, err)
	var m cliModule
	require.NoError(t, json.Unmarshal(out, &m))
	var facts commitFacts
	shallow, err := exec.Command("git", "-C", root, "rev-parse", "--is-shallow-repository").Output()
	if err == nil && strings.TrimSpace(string(shallow)) == "false" {
		facts = func(hash string) (bool, string, bool) {
			git := func(args ...string) (string, error) {
				cmd := exec.Command("git", append([]string{"-C", root}, args...)...)
				cmd.Env = append(os.Environ(), "TZ=UTC")
				out, err := cmd.Output()
				return strings.TrimSpace(string(out)), err
			}
			at, err := git("show", "-s", "--format=%cd", "--date=format-local:%Y%m%d%H%M%S", hash+"^{commit}")
			if err != nil {
				return false, "", false
			}
			_, err = git("cat-file", "-e", hash+":cmd/redlock/go.mod")
			return true, at, err == nil
		}
	} else {
		t.Logf("%s is not a full git checkout (a shallow clone, or no git): the required commit is not checked", root)
	}
	for _, p := range cliModuleProblems(m, module, facts) {
		t.Error("cmd/redlock/go.mod: " + p)
	}
}

func TestCLIModuleFixtures(t *testing.T) {
	const lib = "example.com/m"
	mod := func(path, version string, replace bool) cliModule {
		var m cliModule
		m.Module.Path = path
		m.Require = append(m.Require, struct{ Path, Version string }{lib, version})
		if replace {
			m.Replace = append(m.Replace, struct{ Old struct{ Path string } }{struct{ Path string }{lib}})
		}
		return m
	}
	facts := func(hash string) (bool, string, bool) {
		switch hash {
		case "aaaaaaaaaaaa":
			return true, "20261129050000", true
		case "bbbbbbbbbbbb":
			return true, "20261129050000", false // before the split
		}
		return false, "", false
	}
	good := "v0.0.0-20261129050000-aaaaaaaaaaaa"
	require.Empty(t, cliModuleProblems(mod(lib+"/cmd/redlock", good, false), lib, facts))
	for _, tc := range []struct {
		m    cliModule
		want string
	}{
		{mod(lib, good, false), "want \"example.com/m/cmd/redlock\""},
		{mod(lib+"/cmd/redlock", good, true), "replace directive"},
		{mod(lib+"/cmd/redlock", "v0.0.0-00010101000000-000000000000", false), "a placeholder"},
		{mod(lib+"/cmd/redlock", "v1.2.3", false), "want a pseudo-version"},
		{mod(lib+"/cmd/redlock", "v0.0.0-20261129050000-cccccccccccc", false), "no commit cccccccccccc"},
		{mod(lib+"/cmd/redlock", "v0.0.0-20261129050001-aaaaaaaaaaaa", false), "is of 20261129050000"},
		{mod(lib+"/cmd/redlock", "v0.0.0-20261129050000-bbbbbbbbbbbb", false), "both modules would provide"},
	} {
		got := cliModuleProblems(tc.m, lib, facts)
		require.Len(t, got, 1, tc.want)
		require.Contains(t, got[0], tc.want)
	}
	require.Empty(t, cliModuleProblems(mod(lib+"/cmd/redlock", "v0.0.0-20990101000000-dddddddddddd", false), lib, nil), "without the history only the form is checked")
}
