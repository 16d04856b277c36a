package arch

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The limits and places the checks enforce.
const (
	maxFuncLines = 60                     // per function or method in library code
	toolsDir     = "internal/testkit"     // test and bench tools: not library code
	archDoc      = "docs/ARCHITECTURE.md" // checked by TestArchitectureDoc
)

// libraryRoots returns the directories whose packages, and those below
// them, hold library code; toolsDir is left out.
func libraryRoots() []string { return []string{"redlock", "quorum", "clock", "internal"} }

// importRule forbids the code in one directory tree to import a package
// tree. The import rules see the tools in toolsDir too: they are not library
// code, but they sit in internal/, which holds only what the library imports.
type importRule struct {
	from   string // directory the rule applies to, with those below it; "" for all library code and the tools
	forbid string // import path that may not be imported, with those below it
	why    string // the failure message
	except string // directory, with those below it, the rule leaves out; "" for none
}

// importRules returns the dependency directions for the module whose path
// is module. The rule for all library code covers redlock's imports of test/.
// Go does not let main packages be imported, so the cmd/ rule matters once
// cmd/ holds another package.
func importRules(module string) []importRule {
	return []importRule{
		{"quorum", "github.com/redis/go-redis", "quorum knows nothing about Redis", ""},
		{"clock", module, "clock knows nothing about locks", ""},
		{"internal", module + "/redlock", "dependencies point from redlock to internal, not back", ""},
		{"internal/queue", module + "/quorum", "the local queue knows nothing of what its turns carry", ""},
		{"", module + "/" + toolsDir, "test and bench tools are not for library code", toolsDir},
		{"", module + "/test", "test packages are not for library code", ""},
		{"", module + "/locktest", "the test kit is not for library code", ""},
		{"redlock", module + "/cmd", "the API does not depend on its command", ""},
	}
}

// finding is one violation, at a file (slash-separated, relative to the
// module root) and line.
type finding struct {
	pos  token.Position
	name string // the identifier, import path or doc path at fault
	msg  string
}

func (f finding) String() string {
	return fmt.Sprintf("%s:%d: %s: %s", f.pos.Filename, f.pos.Line, f.name, f.msg)
}

// under reports whether p is dir or lies below it; every p is under "".
func under(p, dir string) bool {
	return dir == "" || p == dir || strings.HasPrefix(p, dir+"/")
}

// parseLibrary parses the library code in fsys, a module's root: the non-test
// .go files below libraryRoots, leaving out testdata, directories whose
// names start with "." or "_", nested modules, and, unless tools is set,
// toolsDir. File names in the FileSet are paths relative to the root. A
// missing root is an error, so that a rename cannot switch the checks off
// unnoticed.
func parseLibrary(fsys fs.FS, tools bool) (*token.FileSet, []*ast.File, error) {
	fset := token.NewFileSet()
	var files []*ast.File
	for _, root := range libraryRoots() {
		err := fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if p != root && (skippedDir(d.Name()) || !tools && p == toolsDir || exists(fsys, p+"/go.mod")) {
					return fs.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			src, err := fs.ReadFile(fsys, p)
			if err != nil {
				return err
			}
			f, err := parser.ParseFile(fset, p, src, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			files = append(files, f)
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("library root %s: %w", root, err)
		}
	}
	return fset, files, nil
}

func skippedDir(name string) bool {
	return name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")
}

func exists(fsys fs.FS, p string) bool {
	_, err := fs.Stat(fsys, p)
	return err == nil
}

func fileName(fset *token.FileSet, f *ast.File) string { return fset.File(f.Pos()).Name() }

// packageVars reports every package-level var except sentinel errors (the
// initializer is a call to errors.New or fmt.Errorf), vars carrying a
// //go:embed directive, and the blank identifier (`var _ I = (*T)(nil)`).
func packageVars(fset *token.FileSet, files []*ast.File) []finding {
	var out []finding
	for _, f := range files {
		std := stdNames(f)
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				if embeds(vs.Doc) || (!gd.Lparen.IsValid() && embeds(gd.Doc)) {
					continue
				}
				for i, name := range vs.Names {
					if name.Name == "_" || len(vs.Values) == len(vs.Names) && sentinel(vs.Values[i], std) {
						continue
					}
					out = append(out, finding{fset.Position(name.Pos()), name.Name,
						"package-level var: make it a const, a field or an option " +
							"(only sentinel errors, //go:embed and var _ are allowed)"})
				}
			}
		}
	}
	return out
}

// stdNames maps the names under which f imports "errors" and "fmt" to their
// paths.
func stdNames(f *ast.File) map[string]string {
	names := map[string]string{}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		if p != "errors" && p != "fmt" {
			continue
		}
		name := p
		if imp.Name != nil {
			name = imp.Name.Name
		}
		names[name] = p
	}
	return names
}

func sentinel(e ast.Expr, std map[string]string) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	if !ok {
		return false
	}
	fn := std[pkg.Name] + "." + sel.Sel.Name
	return fn == "errors.New" || fn == "fmt.Errorf"
}

func embeds(doc *ast.CommentGroup) bool {
	if doc == nil {
		return false
	}
	for _, c := range doc.List {
		if strings.HasPrefix(c.Text, "//go:embed ") || strings.HasPrefix(c.Text, "//go:embed\t") {
			return true
		}
	}
	return false
}

// initFuncs reports every func init.
func initFuncs(fset *token.FileSet, files []*ast.File) []finding {
	var out []finding
	for _, f := range files {
		for _, decl := range f.Decls {
			if fd, ok := decl.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Name.Name == "init" {
				out = append(out, finding{fset.Position(fd.Pos()), "init",
					"func init: initialize where the value is made, or lazily"})
			}
		}
	}
	return out
}

// longFuncs reports the functions and methods of more than maxFuncLines
// lines, counted from the line of `func` to that of the closing brace. A
// function is exempt when it is mostly a table: more than half of its lines
// lie within composite literals (from the line of `{` to that of `}`).
// Function literals count towards the function that contains them.
func longFuncs(fset *token.FileSet, files []*ast.File) []finding {
	var out []finding
	for _, f := range files {
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.Body.Rbrace).Line - fset.Position(fd.Pos()).Line + 1
			if n <= maxFuncLines || 2*tableLines(fset, fd.Body) > n {
				continue
			}
			out = append(out, finding{fset.Position(fd.Pos()), funcName(fd),
				fmt.Sprintf("%d lines (max %d, unless more than half are composite literals)", n, maxFuncLines)})
		}
	}
	return out
}

// tableLines counts the lines of body that lie within composite literals.
func tableLines(fset *token.FileSet, body *ast.BlockStmt) int {
	lines := map[int]bool{}
	ast.Inspect(body, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		for l := fset.Position(lit.Lbrace).Line; l <= fset.Position(lit.Rbrace).Line; l++ {
			lines[l] = true
		}
		return false // nested literals lie within this one
	})
	return len(lines)
}

// funcName returns "F" for a function and "T.M" for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	if x, ok := namedType(fd.Recv.List[0].Type).(*ast.Ident); ok {
		return x.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// namedType returns t without pointers and type arguments: the named type
// it refers to, or a type literal.
func namedType(t ast.Expr) ast.Expr {
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		default:
			return t
		}
	}
}

// badImports reports the imports that break one of rules.
func badImports(fset *token.FileSet, files []*ast.File, rules []importRule) []finding {
	var out []finding
	for _, f := range files {
		dir := path.Dir(fileName(fset, f))
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			for _, r := range rules {
				if under(dir, r.from) && under(p, r.forbid) && (r.except == "" || !under(dir, r.except)) {
					out = append(out, finding{fset.Position(imp.Pos()), p, r.why})
				}
			}
		}
	}
	return out
}

// moduleRoot returns the root of the repository's main module and the module
// path it declares, found from the working directory by [findModuleRoot].
func moduleRoot(t *testing.T) (root, module string) {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	root, module, err = findModuleRoot(dir)
	require.NoError(t, err)
	return root, module
}

// findModuleRoot walks up from dir to the first go.mod, then on to each
// enclosing go.mod whose module path, joined with the directory between the
// two, is the path of the module it encloses. So from test/arch, inside the
// nested module example.com/m/test, it returns the root of example.com/m. It
// stops below an enclosing module of another path, and fails when no go.mod
// is found or one has no module line.
func findModuleRoot(dir string) (root, module string, err error) {
	root, module, err = goModAbove(dir)
	if err != nil {
		return "", "", err
	}
	if root == "" {
		return "", "", fmt.Errorf("no go.mod at or above %s", dir)
	}
	for {
		outer, path, err := goModAbove(filepath.Dir(root))
		if err != nil || outer == "" || outer == root {
			return root, module, err
		}
		rel, err := filepath.Rel(outer, root)
		if err != nil || path+"/"+filepath.ToSlash(rel) != module {
			return root, module, err
		}
		root, module = outer, path
	}
}

// goModAbove returns the directory of the first go.mod at or above dir and
// the module path it declares, or "" when there is none.
func goModAbove(dir string) (root, module string, err error) {
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil {
			for _, line := range strings.Split(string(data), "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
					return dir, strings.Trim(f[1], `"`), nil
				}
			}
			return "", "", fmt.Errorf("%s: no module line", filepath.Join(dir, "go.mod"))
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", "", err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", "", nil
		}
		dir = parent
	}
}

// library parses the module's library code, and with tools set the tools
// in toolsDir too.
func library(t *testing.T, tools bool) (*token.FileSet, []*ast.File, string) {
	t.Helper()
	root, module := moduleRoot(t)
	fset, files, err := parseLibrary(os.DirFS(root), tools)
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return fset, files, module
}

func report(t *testing.T, findings []finding) {
	t.Helper()
	for _, f := range findings {
		t.Error(f.String())
	}
}

func TestNoPackageVars(t *testing.T) {
	fset, files, _ := library(t, false)
	report(t, packageVars(fset, files))
	report(t, initFuncs(fset, files))
}

func TestFuncSize(t *testing.T) {
	fset, files, _ := library(t, false)
	report(t, longFuncs(fset, files))
}

func TestImports(t *testing.T) {
	fset, files, module := library(t, true)
	report(t, badImports(fset, files, importRules(module)))
}

// The fixture tests below run each check on a small module in memory, with
// and without a violation, to show that the check sees it.

// fixture returns a module root in memory holding files (path to content)
// beside a go.mod.
func fixture(files map[string]string) fstest.MapFS {
	fsys := fstest.MapFS{"go.mod": {Data: []byte("module example.com/m\n")}}
	for _, root := range libraryRoots() {
		fsys[root+"/doc.go"] = &fstest.MapFile{Data: []byte("package " + path.Base(root) + "\n")}
	}
	for p, src := range files {
		fsys[p] = &fstest.MapFile{Data: []byte(src)}
	}
	return fsys
}

// run parses the library code of fixture(files) and returns where check
// reports findings, as "file:line name".
func run(t *testing.T, files map[string]string, check func(*token.FileSet, []*ast.File) []finding) []string {
	t.Helper()
	return runWith(t, files, false, check)
}

// runWith is run with the tools in toolsDir parsed too when tools is set.
func runWith(t *testing.T, files map[string]string, tools bool, check func(*token.FileSet, []*ast.File) []finding) []string {
	t.Helper()
	fset, parsed, err := parseLibrary(fixture(files), tools)
	require.NoError(t, err)
	return where(check(fset, parsed))
}

func where(findings []finding) []string {
	out := []string{}
	for _, f := range findings {
		out = append(out, fmt.Sprintf("%s:%d %s", f.pos.Filename, f.pos.Line, f.name))
	}
	return out
}

func TestParseLibraryMissingRoot(t *testing.T) {
	fsys := fixture(nil)
	delete(fsys, "quorum/doc.go")
	_, _, err := parseLibrary(fsys, false)
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

func TestFindModuleRoot(t *testing.T) {
	tests := []struct {
		name   string
		gomods map[string]string // directory (slash-separated, below a temporary root) → module path
		start  string            // where the walk starts
		root   string            // the expected root, "" for an error
		module string
	}{
		{"nested module steps out", map[string]string{".": "example.com/m", "test": "example.com/m/test"},
			"test/arch", ".", "example.com/m"},
		{"single module", map[string]string{".": "example.com/m"}, "test/arch", ".", "example.com/m"},
		{"two levels", map[string]string{".": "example.com/m", "a": "example.com/m/a", "a/b": "example.com/m/a/b"},
			"a/b/c", ".", "example.com/m"},
		{"unrelated outer module", map[string]string{".": "example.com/outer", "test": "example.com/test"},
			"test/arch", "test", "example.com/test"},
		{"path not matching the directory", map[string]string{".": "example.com/m", "tools": "example.com/m/test"},
			"tools/arch", "tools", "example.com/m/test"},
		{"no module line", map[string]string{".": "example.com/m", "test": ""}, "test/arch", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			for dir, mod := range tt.gomods {
				d := filepath.Join(base, filepath.FromSlash(dir))
				require.NoError(t, os.MkdirAll(d, 0o755))
				data := "go 1.26.0\n"
				if mod != "" {
					data = "module " + mod + "\n\n" + data
				}
				require.NoError(t, os.WriteFile(filepath.Join(d, "go.mod"), []byte(data), 0o644))
			}
			start := filepath.Join(base, filepath.FromSlash(tt.start))
			require.NoError(t, os.MkdirAll(start, 0o755))
			root, module, err := findModuleRoot(start)
			if tt.root == "" {
				assert.ErrorContains(t, err, "no module line")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, filepath.Join(base, filepath.FromSlash(tt.root)), root)
			assert.Equal(t, tt.module, module)
		})
	}
}

func TestPackageVarsFixtures(t *testing.T) {
	tests := []struct {
		name string
		src  map[string]string
		want []string
	}{
		{"tunable", map[string]string{"redlock/a.go": "package redlock\n\nimport \"time\"\n\nvar batchWindow = 5 * time.Millisecond\n"},
			[]string{"redlock/a.go:5 batchWindow"}},
		{"pool and map in a group", map[string]string{"quorum/a.go": "package quorum\n\nimport \"sync\"\n\nvar (\n\tpool = sync.Pool{}\n\tm    = map[int]int{}\n)\n"},
			[]string{"quorum/a.go:6 pool", "quorum/a.go:7 m"}},
		{"closed channel and init", map[string]string{"internal/x/a.go": "package x\n\nvar closed = make(chan struct{})\n\nfunc init() { close(closed) }\n"},
			[]string{"internal/x/a.go:3 closed", "internal/x/a.go:5 init"}},
		{"declared without a value", map[string]string{"clock/a.go": "package clock\n\nvar n int\n"},
			[]string{"clock/a.go:3 n"}},
		{"blank beside a named var", map[string]string{"redlock/a.go": "package redlock\n\nvar _, n = 1, 2\n"},
			[]string{"redlock/a.go:3 n"}},
		{"error from another function", map[string]string{"redlock/a.go": "package redlock\n\nimport \"errors\"\n\nvar err = errors.Join(nil)\n"},
			[]string{"redlock/a.go:5 err"}},
		{"New of another package", map[string]string{"redlock/a.go": "package redlock\n\nimport errors \"strings\"\n\nvar r = errors.New(\"\")\n"},
			[]string{"redlock/a.go:5 r"}},
		{"go:embed in a group does not cover its neighbour", map[string]string{"internal/s/a.go": "package s\n\nimport _ \"embed\"\n\nvar (\n\t//go:embed a.lua\n\tsrc string\n\tn = 1\n)\n"},
			[]string{"internal/s/a.go:8 n"}},
		{"sentinels, embeds and assertions", map[string]string{"redlock/a.go": `package redlock

import (
	_ "embed"
	"errors"
	xerr "fmt"
)

var ErrA = errors.New("a")

var (
	// ErrB is b.
	ErrB = xerr.Errorf("b: %w", ErrA)
	errC = errors.New("c")
)

//go:embed a.lua
var src string

var (
	//go:embed b.lua
	srcB string
)

var _ error = (*E)(nil)

type E struct{}

func (*E) Error() string { return "" }
`}, nil},
		{"not library code", map[string]string{
			"redlock/a_test.go":         "package redlock\n\nvar hook = 1\n\nfunc init() {}\n",
			"internal/testkit/x/a.go":   "package x\n\nvar n = 1\n",
			"cmd/redlock/main.go":       "package main\n\nvar n = 1\n",
			"test/a.go":                 "package test\n\nvar n = 1\n",
			"redlock/testdata/a.go":     "package a\n\nvar n = 1\n",
			"internal/nested/go.mod":    "module example.com/nested\n",
			"internal/nested/nested.go": "package nested\n\nvar n = 1\n",
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := run(t, tt.src, func(fset *token.FileSet, files []*ast.File) []finding {
				return append(packageVars(fset, files), initFuncs(fset, files)...)
			})
			assert.ElementsMatch(t, tt.want, got)
		})
	}
}

// lines returns a source of n lines: head, filler lines and tail.
func lines(n int, head, filler, tail string) string {
	return head + strings.Repeat(filler, n-strings.Count(head, "\n")-strings.Count(tail, "\n")) + tail
}

func TestFuncSizeFixtures(t *testing.T) {
	const head = "package redlock\n\n"
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"61-line function", head + lines(61, "func f() {\n", "\t_ = 0\n", "}\n"), []string{"redlock/f.go:3 f"}},
		{"61-line generic method", head + "type T[K any] struct{}\n\n" + lines(61, "func (t *T[K]) M() {\n", "\t_ = 0\n", "}\n"),
			[]string{"redlock/f.go:5 T.M"}},
		{"60-line function", head + lines(60, "func f() {\n", "\t_ = 0\n", "}\n"), nil},
		{"61-line table", head + lines(61, "func f() []int {\n\treturn []int{\n", "\t\t1,\n", "\t}\n}\n"), nil},
		{"exactly half a table is not enough", head +
			lines(30, "func f() []int {\n", "\t_ = 0\n", "") + lines(32, "\treturn []int{\n", "\t\t1,\n", "\t}\n}\n"),
			[]string{"redlock/f.go:3 f"}},
		{"function literals count", head + lines(61, "func f() {\n\tg := func() {\n", "\t\t_ = 0\n", "\t}\n\tg()\n}\n"),
			[]string{"redlock/f.go:3 f"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.ElementsMatch(t, tt.want, run(t, map[string]string{"redlock/f.go": tt.src}, longFuncs))
		})
	}
}

func TestImportsFixtures(t *testing.T) {
	imports := func(pkg string, paths ...string) string {
		return "package " + pkg + "\n\nimport (\n\t_ \"" + strings.Join(paths, "\"\n\t_ \"") + "\"\n)\n"
	}
	tests := []struct {
		name string
		src  map[string]string
		want []string
	}{
		{"quorum imports go-redis", map[string]string{"quorum/a.go": imports("quorum", "context", "github.com/redis/go-redis/v9")},
			[]string{"quorum/a.go:5 github.com/redis/go-redis/v9"}},
		{"clock imports the module", map[string]string{"clock/a.go": imports("clock", "example.com/m/internal/retry")},
			[]string{"clock/a.go:4 example.com/m/internal/retry"}},
		{"internal imports redlock", map[string]string{"internal/node/a.go": imports("node", "example.com/m/redlock")},
			[]string{"internal/node/a.go:4 example.com/m/redlock"}},
		{"library imports test tools", map[string]string{
			"redlock/a.go":      imports("redlock", "example.com/m/internal/testkit/leakcheck", "example.com/m/test/rig"),
			"internal/x/a.go":   imports("x", "example.com/m/test"),
			"quorum/a.go":       imports("quorum", "example.com/m/internal/testkit"),
			"redlock/b.go":      imports("redlock", "example.com/m/cmd/redlock"),
			"redlock/c.go":      imports("redlock", "example.com/m/locktest/loadtest"),
			"redlock/b_test.go": imports("redlock", "example.com/m/internal/testkit/leakcheck"),
		}, []string{
			"redlock/a.go:4 example.com/m/internal/testkit/leakcheck", "redlock/a.go:5 example.com/m/test/rig",
			"internal/x/a.go:4 example.com/m/test", "quorum/a.go:4 example.com/m/internal/testkit",
			"redlock/b.go:4 example.com/m/cmd/redlock", "redlock/c.go:4 example.com/m/locktest/loadtest",
		}},
		{"tools in internal import redlock or test", map[string]string{
			"internal/testkit/x/a.go": imports("x", "example.com/m/redlock", "example.com/m/test/rig"),
		}, []string{"internal/testkit/x/a.go:4 example.com/m/redlock", "internal/testkit/x/a.go:5 example.com/m/test/rig"}},
		{"dependencies that point the right way", map[string]string{
			"redlock/a.go":            imports("redlock", "example.com/m/quorum", "example.com/m/clock", "example.com/m/internal/retry", "github.com/redis/go-redis/v9"),
			"quorum/a.go":             imports("quorum", "example.com/m/internal/alloc", "github.com/hashicorp/go-multierror"),
			"clock/a.go":              imports("clock", "time", "example.com/mother"),
			"internal/x/a.go":         imports("x", "example.com/m/redlockish", "github.com/redis/go-redis/v9"),
			"internal/testkit/x/a.go": imports("x", "example.com/m/internal/testkit/y", "github.com/redis/go-redis/v9"),
			"quorum/a_test.go":        imports("quorum", "github.com/redis/go-redis/v9"),
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := runWith(t, tt.src, true, func(fset *token.FileSet, files []*ast.File) []finding {
				return badImports(fset, files, importRules("example.com/m"))
			})
			assert.ElementsMatch(t, tt.want, got)
		})
	}
}
