package layers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// repoRoot is the checkout's root, seen from this package's directory.
const repoRoot = "../.."

// goSource is one parsed Go file of the checkout.
type goSource struct {
	rel  string // slash-separated path from the checkout's root
	fset *token.FileSet
	file *ast.File
}

// goSources parses every Go file of the checkout for which keep(rel) is
// true, comments included: both modules (the root's and deploy/checks'),
// the e2e tests and files behind build tags, which `go list` would leave
// out. testdata is skipped: what it holds is input to tests, copied into
// scratch modules, not code of this one.
func goSources(t *testing.T, keep func(rel string) bool) []goSource {
	t.Helper()
	var out []goSource
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != repoRoot && (n == "testdata" || n == "vendor" || strings.HasPrefix(n, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(repoRoot, p)
		rel = filepath.ToSlash(rel)
		if !strings.HasSuffix(rel, ".go") || !keep(rel) {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, rel, src, parser.ParseComments)
		if err != nil {
			return err
		}
		out = append(out, goSource{rel, fset, f})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rel < out[j].rel })
	return out
}
