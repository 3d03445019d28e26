package layers

import (
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Every package under pkg/ is one API names, and every API entry still
// names a package: a package that no other program should import goes
// under internal/ instead of growing pkg/.
func TestPkgHoldsOnlyTheAPI(t *testing.T) {
	var pkgs []string
	err := filepath.WalkDir(filepath.Join(repoRoot, "pkg"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() && holdsGo(p) {
			rel, _ := filepath.Rel(repoRoot, p)
			pkgs = append(pkgs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < len(API) {
		t.Fatalf("found %d packages under pkg/, fewer than API's %d entries: %v", len(pkgs), len(API), pkgs)
	}
	used := map[string]bool{}
	for _, p := range pkgs {
		entry := apiEntry(p)
		if entry == "" {
			t.Errorf("%s is under pkg/ but not in internal/layers.API: move it under internal/, or say why another program would import it", p)
		}
		used[entry] = true
	}
	var stale []string
	for e := range API {
		if !used[e] {
			stale = append(stale, e)
		}
	}
	sort.Strings(stale)
	for _, e := range stale {
		t.Errorf("internal/layers.API names %s, which holds no package", e)
	}
}

func apiEntry(p string) string {
	if _, ok := API[p]; ok {
		return p
	}
	for e := range API {
		if base, ok := strings.CutSuffix(e, "/..."); ok && (p == base || strings.HasPrefix(p, base+"/")) {
			return e
		}
	}
	return ""
}

// The check itself: a package outside API is reported, and so is an
// entry that names nothing.
func TestAPIEntry(t *testing.T) {
	for p, want := range map[string]string{
		"pkg/power":         "pkg/power/...",
		"pkg/power/redfish": "pkg/power/...",
		"pkg/reading":       "pkg/reading",
		"pkg/stats":         "",
		"pkg/readingx":      "",
		"pkg/units/store":   "",
	} {
		if got := apiEntry(p); got != want {
			t.Errorf("apiEntry(%q) = %q, want %q", p, got, want)
		}
	}
}
