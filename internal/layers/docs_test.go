package layers

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// mapRow is one row of docs/architecture.md's package table:
// | `path` | layer | what it holds |
var mapRow = regexp.MustCompile("^\\| `([^`]+)` \\| ([^|]+) \\| (.+) \\|$")

// architectureMap reads the package table of docs/architecture.md's
// "Packages" section: each row's package path and layer.
func architectureMap(t *testing.T, doc string) map[string]string {
	t.Helper()
	_, section, ok := strings.Cut(doc, "\n## Packages\n")
	if !ok {
		t.Fatal(`docs/architecture.md has no "## Packages" section`)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	rows := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		m := mapRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if _, dup := rows[m[1]]; dup {
			t.Errorf("docs/architecture.md lists %s twice", m[1])
		}
		rows[m[1]] = strings.TrimSpace(m[2])
	}
	return rows
}

// docs/architecture.md is the map of the code: every package of the module
// has its row, in the layer internal/layers gives it, and every row names
// a directory that still holds Go code (the rows of the deploy/checks
// module and of the e2e tests, which `go list ./...` leaves out, included).
func TestArchitectureMapsEveryPackage(t *testing.T) {
	data, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := architectureMap(t, string(data))
	g := moduleGraph(t)
	pkgs := make([]string, 0, len(g))
	for p := range g {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		layer, ok := rows[p]
		if !ok {
			t.Errorf("%s is not in docs/architecture.md's package table: add its row (| `%s` | layer | what it holds |)", p, p)
			continue
		}
		if want, ok := LayerOf(p); ok && layer != want.String() {
			t.Errorf("docs/architecture.md puts %s in layer %q; internal/layers.Layers says %q", p, layer, want)
		}
	}
	for p := range rows {
		if _, ok := g[p]; ok {
			continue
		}
		if !holdsGo(filepath.Join("../..", p)) {
			t.Errorf("docs/architecture.md lists %s, which is no package of the module and no directory holding Go files", p)
		}
	}
}

// docPath is a repository path written in backticks in the docs: a
// package, a directory or a file (a glob such as probes_bpfel.*), or a
// package-qualified name (internal/layers.Layers) or pattern (pkg/units/...).
var docPath = regexp.MustCompile("`((?:pkg|cmd|internal|bpf|docs|deploy|scripts|e2e)/[^` ]+)`")

// Every path docs/architecture.md names in backticks exists, so that its
// checklists name the files a change really touches: a file renamed or a
// package moved without its docs fails here.
func TestArchitecturePathsExist(t *testing.T) {
	data, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, m := range docPath.FindAllStringSubmatch(string(data), -1) {
		p := m[1]
		if seen[p] {
			continue
		}
		seen[p] = true
		if !docPathExists(p) {
			t.Errorf("docs/architecture.md names %s, which does not exist", p)
		}
	}
	if len(seen) < 20 {
		t.Errorf("found %d paths in docs/architecture.md; the pattern misses them", len(seen))
	}
}

// docPathExists resolves a docs path against the repository root.
func docPathExists(p string) bool {
	p = strings.TrimSuffix(p, "/...")
	if matches, err := filepath.Glob(filepath.Join("../..", p)); err == nil && len(matches) > 0 {
		return true
	}
	// pkg/name.Identifier: the package must exist (the identifier is
	// left to the compiler and the reader).
	if i := strings.LastIndexByte(p, '.'); i > strings.LastIndexByte(p, '/') {
		return holdsGo(filepath.Join("../..", p[:i]))
	}
	return false
}

// holdsGo reports whether dir exists and holds .go files.
func holdsGo(dir string) bool {
	matches, err := filepath.Glob(filepath.Join(dir, "*.go"))
	return err == nil && len(matches) > 0
}

// The table reader finds what the test relies on: a package without a row,
// a row in the wrong layer and a row for a package that is gone each show.
func TestArchitectureMapReader(t *testing.T) {
	doc := "# A\n\n## Packages\n\n| Package | Layer | Holds |\n| --- | --- | --- |\n" +
		"| `pkg/model` | model | The split. |\n" +
		"| `internal/stats` | stats | The loop \\| its stages. |\n" +
		"\n## Next\n\n| `pkg/other` | sources | Not in the section. |\n"
	got := architectureMap(t, doc)
	want := map[string]string{"pkg/model": "model", "internal/stats": "stats"}
	if len(got) != len(want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	for p, l := range want {
		if got[p] != l {
			t.Errorf("row %s: layer %q, want %q", p, got[p], l)
		}
	}
	if holdsGo("../../pkg/no-such-package") || !holdsGo("../../pkg/model") {
		t.Error("holdsGo does not tell a package directory from a missing one")
	}
	for p, want := range map[string]bool{
		"internal/stats/split.go": true, "internal/bpfloader/probes_bpfel.*": true, "pkg/units/...": true,
		"internal/layers.Layers": true, "internal/stats/gone.go": false, "pkg/gone.Name": false,
	} {
		if docPathExists(p) != want {
			t.Errorf("docPathExists(%q) = %v, want %v", p, !want, want)
		}
	}
}
