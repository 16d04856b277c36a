package arch

import (
	"go/token"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// codeSpans returns the inline code spans of the Markdown file doc in fsys,
// each as a finding without a message, at its line. Fenced code blocks are
// not read, and a span does not continue on the next line.
func codeSpans(fsys fs.FS, doc string) ([]finding, error) {
	text, err := fs.ReadFile(fsys, doc)
	if err != nil {
		return nil, err
	}
	var out []finding
	fenced := false
	for i, line := range strings.Split(string(text), "\n") {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		parts := strings.Split(line, "`")
		for j := 1; j < len(parts)-1; j += 2 { // odd parts lie between backquotes
			out = append(out, finding{pos: token.Position{Filename: doc, Line: i + 1}, name: parts[j]})
		}
	}
	return out, nil
}

// missingDocPaths reports the repository paths that the Markdown file doc
// names in inline code spans and that do not exist in fsys, the module root.
// A span is taken for a repository path
// when it is made only of path characters (letters, digits, "_", "-", "."
// and "/"), after dropping a leading "./" and a trailing ":line", and either
// ends in .go, .lua or .md or contains a "/" after a first element that
// exists at the root (so that `redlock/client.go`, `internal/protocol/` and
// `README.md` are checked, while `github.com/redis/go-redis/v9`,
// `go test ./...` and `N/2` are not).
func missingDocPaths(fsys fs.FS, doc string) ([]finding, error) {
	spans, err := codeSpans(fsys, doc)
	if err != nil {
		return nil, err
	}
	var out []finding
	for _, s := range spans {
		if p, ok := repoPath(fsys, s.name); ok && !exists(fsys, strings.TrimSuffix(p, "/")) {
			out = append(out, finding{s.pos, s.name, "no such file or directory in the repository"})
		}
	}
	return out, nil
}

// repoPath returns the repository path that span names, and whether it names
// one, as [missingDocPaths] describes.
func repoPath(fsys fs.FS, span string) (string, bool) {
	p := strings.TrimPrefix(span, "./")
	if i := strings.LastIndexByte(p, ':'); i >= 0 {
		if _, err := strconv.Atoi(p[i+1:]); err == nil {
			p = p[:i]
		}
	}
	if p == "" || strings.HasPrefix(p, "/") || strings.Trim(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./") != "" {
		return "", false
	}
	elems := strings.Split(strings.TrimSuffix(p, "/"), "/")
	for _, e := range elems {
		if strings.Trim(e, ".") == "" { // "", ".", "..", "..."
			return "", false
		}
	}
	switch {
	case strings.HasSuffix(p, ".go"), strings.HasSuffix(p, ".lua"), strings.HasSuffix(p, ".md"):
		return p, true
	case len(elems) > 1 && exists(fsys, elems[0]):
		return p, true
	}
	return "", false
}

func TestArchitectureDoc(t *testing.T) {
	root, _ := moduleRoot(t)
	findings, err := missingDocPaths(os.DirFS(root), archDoc)
	require.NoError(t, err, "%s must exist", archDoc)
	report(t, findings)
}

func TestArchitectureDocFixtures(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"missing files", "# Layout\n\n" +
			"The scripts live in `internal/protocol/acquire.lua`, the API in `redlock/client.go`.\n" +
			"See `redlock/gone.go:12`, `internal/node/`, `NOTES.md` and `acquire.lua`.\n",
			[]string{
				"docs/ARCHITECTURE.md:3 internal/protocol/acquire.lua", "docs/ARCHITECTURE.md:4 redlock/gone.go:12",
				"docs/ARCHITECTURE.md:4 internal/node/", "docs/ARCHITECTURE.md:4 NOTES.md", "docs/ARCHITECTURE.md:4 acquire.lua",
			}},
		{"existing files and what is not a path", "# Layout\n\n" +
			"`redlock/client.go:40` and `./redlock/client.go` hold [redlock.Client]; `internal/scripts/` the scripts;\n" +
			"`README.md`, `docs/ARCHITECTURE.md` and `redlock` are documented.\n" +
			"Not paths: `github.com/redis/go-redis/v9`, `go test ./...`, `N/2`, `redlock/...`, `errors.Is`, `/tmp/x.go`, `$HOME/a.md`.\n" +
			"An unclosed `redlock/nothing.go\n" +
			"```\ngo run ./cmd/gone\n`redlock/gone.go`\n```\n",
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fsys := fixture(map[string]string{
				"redlock/client.go":        "package redlock\n",
				"internal/scripts/call.go": "package scripts\n",
				"README.md":                "# m\n",
				archDoc:                    tt.doc,
			})
			findings, err := missingDocPaths(fsys, archDoc)
			require.NoError(t, err)
			assert.ElementsMatch(t, tt.want, where(findings))
		})
	}
	_, err := missingDocPaths(fixture(nil), archDoc)
	assert.ErrorIs(t, err, fs.ErrNotExist, "a missing doc is reported as such, so that TestArchitectureDoc can skip")
}
