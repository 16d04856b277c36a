package arch

import (
	"fmt"
	"go/ast"
	"go/token"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// notUsed matches a glossary entry's list of words that the code must not
// use for its concept: "Not used: `a`, `b c`." (see unusedWords).
var notUsed = regexp.MustCompile("Not used: ((?:`[^`]+`(?:, )?)+)")

// unusedWords returns the words that the glossary of the Markdown file doc
// (its section "## Glossary") says are not used, each as its lower-case
// words, with the line that says so. A word stands for those that begin
// with it: "inherit" for "inherited" too.
func unusedWords(fsys fs.FS, doc string) (map[string][]string, map[string]int, error) {
	src, err := fs.ReadFile(fsys, doc)
	if err != nil {
		return nil, nil, err
	}
	words, lines := map[string][]string{}, map[string]int{}
	in := false
	for i, line := range strings.Split(string(src), "\n") {
		if strings.HasPrefix(line, "## ") {
			in = line == "## Glossary"
			continue
		}
		if !in {
			continue
		}
		for _, m := range notUsed.FindAllStringSubmatch(line, -1) {
			for _, w := range strings.Split(m[1], ", ") {
				w = strings.Trim(w, "`")
				words[w], lines[w] = strings.Fields(strings.ToLower(w)), i+1
			}
		}
	}
	if len(words) == 0 {
		return nil, nil, fmt.Errorf("%s: no %q list in its glossary", doc, "Not used:")
	}
	return words, lines, nil
}

// identWords splits a Go identifier into its lower-case words:
// "takeOverExpired" is take, over, expired; "HTTPServer" is http, server;
// "max_wait" is max, wait.
func identWords(id string) []string {
	var words []string
	rs := []rune(id)
	start := 0
	for i := 1; i <= len(rs); i++ {
		split := i == len(rs) || rs[i] == '_' ||
			unicode.IsUpper(rs[i]) && (unicode.IsLower(rs[i-1]) || unicode.IsDigit(rs[i-1]) || i+1 < len(rs) && unicode.IsLower(rs[i+1]))
		if !split {
			continue
		}
		if w := strings.Trim(string(rs[start:i]), "_"); w != "" {
			words = append(words, strings.ToLower(w))
		}
		start = i
	}
	return words
}

// uses reports whether words, an identifier's, hold the phrase: its words
// in a row, each the beginning of one of them.
func uses(words, phrase []string) bool {
	for i := 0; i+len(phrase) <= len(words); i++ {
		ok := true
		for j, p := range phrase {
			if !strings.HasPrefix(words[i+j], p) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// unusedWordsUsed reports every identifier of the Go code in fsys (test
// files and nested modules included) that uses a word that the glossary of
// doc says is not used.
func unusedWordsUsed(fsys fs.FS, doc string) ([]finding, error) {
	banned, lines, err := unusedWords(fsys, doc)
	if err != nil {
		return nil, err
	}
	var out []finding
	fset := token.NewFileSet()
	err = eachGoFile(fsys, fset, func(f *ast.File) {
		seen := map[string]bool{} // report each identifier once a file
		ast.Inspect(f, func(n ast.Node) bool {
			id, ok := n.(*ast.Ident)
			if !ok || seen[id.Name] {
				return true
			}
			words := identWords(id.Name)
			for w, phrase := range banned {
				if uses(words, phrase) {
					seen[id.Name] = true
					out = append(out, finding{fset.Position(id.Pos()), id.Name,
						fmt.Sprintf("uses %q, which %s:%d says is not used", w, doc, lines[w])})
				}
			}
			return true
		})
	})
	return out, err
}

// TestGlossaryWords: no identifier of the repository uses a word that the
// glossary in docs/ARCHITECTURE.md lists as not used for its concept, so
// that each concept keeps one name in the code.
func TestGlossaryWords(t *testing.T) {
	root, _ := moduleRoot(t)
	findings, err := unusedWordsUsed(os.DirFS(root), archDoc)
	require.NoError(t, err)
	report(t, findings)
}

func TestGlossaryWordsFixtures(t *testing.T) {
	doc := "# Architecture\n\n## Glossary\n\n" +
		"- **handover**: a lock passed on with its turn. Not used: `inherit`, `take over`.\n\n" +
		"## Next\n\nNot used: `queue`.\n"
	code := map[string]string{
		archDoc: doc,
		"internal/queue/queue.go": "package queue\n\ntype Turn struct{ inherit int }\n\n" +
			"func (t *Turn) takeOverExpired() {}\n\nfunc (t *Turn) overtake(inheritedLock int) { _ = inheritedLock }\n",
		"redlock/x_test.go": "package redlock\n\nfunc TestHandoverTakesOverKeys() {}\n\nfunc TestTakeOff() {}\n",
	}
	findings, err := unusedWordsUsed(fixture(code), archDoc)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{
		"internal/queue/queue.go:3 inherit", "internal/queue/queue.go:5 takeOverExpired",
		"internal/queue/queue.go:7 inheritedLock", "redlock/x_test.go:3 TestHandoverTakesOverKeys",
	}, where(findings), "a word outside the glossary (queue) is not listed; overtake and TakeOff are other words")

	_, err = unusedWordsUsed(fixture(map[string]string{archDoc: "## Glossary\n\n- **x**: y.\n"}), archDoc)
	assert.ErrorContains(t, err, "no \"Not used:\" list", "a glossary without the list is an error, not a pass")

	assert.Equal(t, []string{"take", "over", "expired"}, identWords("takeOverExpired"))
	assert.Equal(t, []string{"http", "server", "v2"}, identWords("HTTPServerV2"))
	assert.Equal(t, []string{"max", "wait"}, identWords("max_wait"))
}
