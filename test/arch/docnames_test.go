package arch

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// declIndex holds the declarations of a repository's Go code by package
// name. A type is keyed "pkg.Type".
type declIndex struct {
	top     map[string]map[string]bool // package name → its top-level names
	types   map[string][]string        // type name → each package's "pkg.Type"
	members map[string]map[string]bool // "pkg.Type" → its fields and methods
	// embeds maps "pkg.Type" to the types it embeds or is made from, as
	// "pkg.Type" too, or as "@name.Type" for those named through an import.
	embeds  map[string][]string
	imports map[string]bool // the names under which the code imports packages
}

// indexDecls parses every .go file in fsys (see eachGoFile).
func indexDecls(fsys fs.FS) (*declIndex, error) {
	ix := &declIndex{top: map[string]map[string]bool{}, types: map[string][]string{},
		members: map[string]map[string]bool{}, embeds: map[string][]string{}, imports: map[string]bool{}}
	err := eachGoFile(fsys, token.NewFileSet(), func(f *ast.File) { ix.add(f) })
	return ix, err
}

// eachGoFile parses every .go file in fsys, test files and nested modules
// included, except in the directories parseLibrary skips by name, and
// calls fn with each.
func eachGoFile(fsys fs.FS, fset *token.FileSet, fn func(*ast.File)) error {
	return fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != "." && skippedDir(d.Name()) {
			return fs.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") {
			return nil
		}
		src, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(fset, p, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		fn(f)
		return nil
	})
}

// add records the declarations and imports of f.
func (ix *declIndex) add(f *ast.File) {
	pkg := f.Name.Name
	if ix.top[pkg] == nil {
		ix.top[pkg] = map[string]bool{}
	}
	for _, imp := range f.Imports {
		ix.imports[importName(imp)] = true
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil {
				ix.top[pkg][d.Name.Name] = true
			} else if recv, _, ok := strings.Cut(funcName(d), "."); ok {
				ix.member(pkg+"."+recv, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.ValueSpec:
					for _, n := range s.Names {
						ix.top[pkg][n.Name] = true
					}
				case *ast.TypeSpec:
					ix.top[pkg][s.Name.Name] = true
					ix.types[s.Name.Name] = append(ix.types[s.Name.Name], pkg+"."+s.Name.Name)
					ix.addType(pkg, pkg+"."+s.Name.Name, s.Type)
				}
			}
		}
	}
}

// addType records the fields and interface methods of the type key, whose
// definition is t, and what it embeds.
func (ix *declIndex) addType(pkg, key string, t ast.Expr) {
	var fields *ast.FieldList
	switch x := t.(type) {
	case *ast.StructType:
		fields = x.Fields
	case *ast.InterfaceType:
		fields = x.Methods
	default: // made from another type: its fields (struct) or methods (alias) may be promoted
		ix.embed(pkg, key, t)
		return
	}
	for _, fld := range fields.List {
		for _, n := range fld.Names {
			ix.member(key, n.Name)
		}
		if len(fld.Names) == 0 {
			ix.embed(pkg, key, fld.Type)
		}
	}
}

// embed records that key embeds, or is made from, the type t. A type
// literal (func, map, ...) has no members to give.
func (ix *declIndex) embed(pkg, key string, t ast.Expr) {
	switch x := namedType(t).(type) {
	case *ast.Ident:
		ix.member(key, x.Name)
		ix.embeds[key] = append(ix.embeds[key], pkg+"."+x.Name)
	case *ast.SelectorExpr:
		if id, ok := x.X.(*ast.Ident); ok {
			ix.member(key, x.Sel.Name)
			ix.embeds[key] = append(ix.embeds[key], "@"+id.Name+"."+x.Sel.Name)
		}
	}
}

func (ix *declIndex) member(key, name string) {
	if ix.members[key] == nil {
		ix.members[key] = map[string]bool{}
	}
	ix.members[key][name] = true
}

// hasMember reports whether the type key has the field or method name, its
// own or promoted from a type it embeds. A type of another module may have
// any; a predeclared one has none, except error's Error.
func (ix *declIndex) hasMember(key, name string) bool {
	seen := map[string]bool{}
	var has func(string) bool
	has = func(k string) bool {
		k, imported := strings.CutPrefix(k, "@")
		pkg, typ, _ := strings.Cut(k, ".")
		switch {
		case seen[k]:
			return false
		case !ix.top[pkg][typ] && imported:
			return true // a type of a package outside the repository
		case !ix.top[pkg][typ]:
			return typ == "error" && name == "Error"
		}
		seen[k] = true
		if ix.members[k][name] {
			return true
		}
		for _, e := range ix.embeds[k] {
			if has(e) {
				return true
			}
		}
		return false
	}
	return has(key)
}

// importName returns the name under which imp is used: its own name, else
// the last element of its path that is not a major version, without a
// "go-" prefix (github.com/hashicorp/go-multierror is multierror).
func importName(imp *ast.ImportSpec) string {
	if imp.Name != nil {
		return imp.Name.Name
	}
	p, _ := strconv.Unquote(imp.Path.Value)
	name := path.Base(p)
	if _, err := strconv.Atoi(strings.TrimPrefix(name, "v")); err == nil && strings.HasPrefix(name, "v") && strings.Contains(p, "/") {
		name = path.Base(path.Dir(p))
	}
	return strings.TrimPrefix(name, "go-")
}

// fileExts are the extensions that make a span such as `README.md` a file
// name, not a selector.
func fileExts() []string {
	return []string{"go", "lua", "md", "mod", "sum", "yml", "yaml", "json", "txt", "sh", "toml", "svg", "html", "conf"}
}

// missingDocNames reports the Go identifiers that the Markdown file doc
// names in inline code spans and that the repository's code in fsys does
// not declare. A span names one when, without a trailing "()", it is a
// selector of two or three identifiers, not a file name:
//
//   - `pkg.Name` and `pkg.Type.Member`, where pkg is the name of one of the
//     repository's packages, must name a top-level declaration of a package
//     of that name, and a field or method of that type;
//   - `Type.Member`, where Type is a type of the repository, must name a
//     field or method of a type of that name in some package;
//   - any other two-part span must start with the name of a package the
//     code imports (`errors.Is`), which is not checked further.
func missingDocNames(fsys fs.FS, doc string) ([]finding, error) {
	spans, err := codeSpans(fsys, doc)
	if err != nil {
		return nil, err
	}
	ix, err := indexDecls(fsys)
	if err != nil {
		return nil, err
	}
	var out []finding
	for _, s := range spans {
		if msg := ix.check(strings.TrimSuffix(s.name, "()")); msg != "" {
			out = append(out, finding{s.pos, s.name, msg})
		}
	}
	return out, nil
}

// check returns why the selector sel names nothing in the repository, or ""
// when it does or is not taken for a Go selector (see missingDocNames).
func (ix *declIndex) check(sel string) string {
	parts := strings.Split(sel, ".")
	if len(parts) < 2 || len(parts) > 3 || slices.ContainsFunc(parts, func(p string) bool { return !token.IsIdentifier(p) }) {
		return ""
	}
	for _, ext := range fileExts() {
		if parts[len(parts)-1] == ext {
			return ""
		}
	}
	if decls, ok := ix.top[parts[0]]; ok {
		switch {
		case !decls[parts[1]]:
			return fmt.Sprintf("package %s declares no %s", parts[0], parts[1])
		case len(parts) == 3 && !ix.hasMember(parts[0]+"."+parts[1], parts[2]):
			return fmt.Sprintf("%s.%s has no field or method %s", parts[0], parts[1], parts[2])
		}
		return ""
	}
	if len(parts) == 3 {
		return ""
	}
	if keys, ok := ix.types[parts[0]]; ok {
		for _, k := range keys {
			if ix.hasMember(k, parts[1]) {
				return ""
			}
		}
		return fmt.Sprintf("no type %s has a field or method %s", parts[0], parts[1])
	}
	if !ix.imports[parts[0]] {
		return fmt.Sprintf("%s is neither a package nor a type of the repository, nor a package it imports", parts[0])
	}
	return ""
}

func TestArchitectureDocNames(t *testing.T) {
	root, _ := moduleRoot(t)
	findings, err := missingDocNames(os.DirFS(root), archDoc)
	require.NoError(t, err)
	report(t, findings)
}

func TestArchitectureDocNamesFixtures(t *testing.T) {
	code := map[string]string{
		"redlock/client.go": `package redlock

import (
	"context"
	"errors"

	"example.com/m/internal/queue"
	redis "github.com/redis/go-redis/v9"
)

type Client struct {
	obs *Observer
	queue.Queue
	*base
}

type base struct{ inService bool }

type Observer struct{ Begin func(context.Context) }

type Options struct {
	MaxWait int
	Nodes   []redis.UniversalClient
}

type wrapped struct{ redis.Cmdable }

type tuned Options

func (c *Client) Lock(ctx context.Context) error { return errors.New("x") }

func (c *Client) lock() {}

func New() {}

const ErrNotHeld = 1
`,
		"internal/queue/queue.go": "package queue\n\ntype Queue struct{}\n\nfunc (q *Queue) Wait() {}\n\ntype Handover string\n",
		"internal/retry/retry.go": "package retry\n\nfunc Delay() {}\n",
		"internal/wake/wake.go":   "package wake\n\ntype Waker interface{ Next() }\n",
		"quorum/quorum.go":        "package quorum\n\ntype Round[T any] struct{}\n\nfunc (r *Round[T]) Result() {}\n",
		"redlock/x_test.go":       "package redlock\n\nfunc newTuned() {}\n",
		"contrib/otel/go.mod":     "module example.com/m/contrib/otel\n",
		"contrib/otel/otel.go":    "package otel\n\nfunc New() {}\n",
	}
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"missing identifiers", "# Path\n\n" +
			"`retry.Token` makes a token; `retry.Delay` waits; `Client.Unlock()`, `Client.lock`.\n" +
			"`quorum.Round.Await` and `redlock.Client.Close` and `Waker.Expect` and `Clinet.Lock`.\n" +
			"`round.acquireOn` and `queue.Handover.Token` and `otel.Tracer` and `Client.Missing` and `tuned.Lock`.\n",
			[]string{
				"docs/ARCHITECTURE.md:3 retry.Token", "docs/ARCHITECTURE.md:3 Client.Unlock()",
				"docs/ARCHITECTURE.md:4 quorum.Round.Await", "docs/ARCHITECTURE.md:4 redlock.Client.Close",
				"docs/ARCHITECTURE.md:4 Waker.Expect", "docs/ARCHITECTURE.md:4 Clinet.Lock",
				"docs/ARCHITECTURE.md:5 round.acquireOn", "docs/ARCHITECTURE.md:5 queue.Handover.Token",
				"docs/ARCHITECTURE.md:5 otel.Tracer", "docs/ARCHITECTURE.md:5 Client.Missing",
				"docs/ARCHITECTURE.md:5 tuned.Lock",
			}},
		{"identifiers that exist and spans that are none", "# Path\n\n" +
			"`redlock.Client.Lock`, `Client.Lock()`, `Client.lock`, `Client.obs`, `Client.Wait` (promoted), `Client.inService` (promoted twice),\n" +
			"`quorum.Round.Result`, `Round.Result`, `redlock.ErrNotHeld`, `redlock.newTuned` (a test file), `otel.New` (a nested module),\n" +
			"`Options.MaxWait`, `tuned.MaxWait` (made from Options), `wrapped.Get` (embeds another package's type), `Waker.Next`, `Observer.Begin`,\n" +
			"`errors.Is`, `context.WithCancelCause`, `redis.NewScript`, `queue.Handover`.\n" +
			"Not selectors: `README.md`, `internal/protocol/acquire.lua`, `go test ./...`, `a.b.c.d`, `x := y.z`, `Client`, `WithSlice[T]`.\n" +
			"```\n`retry.Token`\n```\n",
			nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code[archDoc] = tt.doc
			findings, err := missingDocNames(fixture(code), archDoc)
			require.NoError(t, err)
			assert.ElementsMatch(t, tt.want, where(findings))
		})
	}
}
