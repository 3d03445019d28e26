package layers

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// skipAllowed are the direct skips that are no host's lack and so are not
// testenv.Need's to decide, keyed by file and function, each with the
// reason it may skip in CI too. Skips under `if testing.Short()` need no
// entry: -short is the caller asking for fewer tests, on any machine.
var skipAllowed = map[string]string{
	"internal/units/updater/bench_test.go:BenchmarkCycle5000": "a benchmark whose fixture holds 12 cycles of history refuses a larger -benchtime: the caller's flag, not the host",
}

// Every test that skips for want of root, BPF, a tool or a file does so
// through internal/testenv (Need, NotApplicable, RequireRoot, Tool …),
// which fails it under CI: a t.Skip written in a test file would skip in CI
// as well, and the test would stop running there unnoticed.
func TestSkipsGoThroughTestenv(t *testing.T) {
	srcs := goSources(t, func(rel string) bool { return strings.HasSuffix(rel, "_test.go") })
	if len(srcs) < 100 {
		t.Fatalf("found %d test files: the walk of the checkout is broken", len(srcs))
	}
	used := map[string]bool{}
	for _, s := range srcs {
		for _, v := range directSkips(s.fset, s.file, s.rel) {
			if _, ok := skipAllowed[v.key]; ok {
				used[v.key] = true
				continue
			}
			t.Errorf("%s: %s calls %s directly: use testenv.Need (skips on a laptop, fails in CI) or testenv.NotApplicable, or add %q to skipAllowed with the reason", v.pos, v.fn, v.call, v.key)
		}
	}
	for k := range skipAllowed {
		if !used[k] {
			t.Errorf("skipAllowed lists %s, which no longer skips directly: remove it", k)
		}
	}
}

// directSkip is one call of Skip, Skipf or SkipNow outside testing.Short.
type directSkip struct {
	pos  token.Position
	fn   string // the enclosing function
	call string // Skip, Skipf or SkipNow
	key  string // rel:fn, skipAllowed's key
}

// directSkips finds the file's calls of X.Skip, X.Skipf and X.SkipNow that
// are not inside the body of `if testing.Short() { … }`.
func directSkips(fset *token.FileSet, f *ast.File, rel string) []directSkip {
	var out []directSkip
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		var short []ast.Node // bodies of if testing.Short()
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.IfStmt:
				if isTestingShort(n.Cond) {
					short = append(short, n.Body)
				}
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				switch sel.Sel.Name {
				case "Skip", "Skipf", "SkipNow":
				default:
					return true
				}
				for _, b := range short {
					if b.Pos() <= n.Pos() && n.End() <= b.End() {
						return true
					}
				}
				out = append(out, directSkip{fset.Position(n.Pos()), fd.Name.Name, sel.Sel.Name, rel + ":" + fd.Name.Name})
			}
			return true
		})
	}
	return out
}

func isTestingShort(e ast.Expr) bool {
	c, ok := e.(*ast.CallExpr)
	if !ok || len(c.Args) != 0 {
		return false
	}
	sel, ok := c.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && x.Name == "testing" && sel.Sel.Name == "Short"
}

// The checker itself: each way of skipping directly is found, and only
// testing.Short's body is let through.
func TestDirectSkipsFound(t *testing.T) {
	const src = `package p

import "testing"

func TestA(t *testing.T) { t.Skip("no BTF") }
func TestB(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	t.Skipf("no %s", "tool")
}
func TestC(t *testing.T) {
	if testing.Short() || true {
		t.SkipNow()
	}
}
func BenchmarkD(b *testing.B) { b.Skip("no host file") }
func TestE(t *testing.T) { t.Log("runs") }
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p_test.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range directSkips(fset, f, "p_test.go") {
		got = append(got, fmt.Sprintf("%d:%s:%s", v.pos.Line, v.fn, v.call))
	}
	want := []string{"5:TestA:Skip", "10:TestB:Skipf", "14:TestC:SkipNow", "17:BenchmarkD:Skip"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("direct skips %v, want %v", got, want)
	}
}
