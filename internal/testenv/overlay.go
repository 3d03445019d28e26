package testenv

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Overlay builds and tests the module with files added or patched through
// the go command's -overlay, so no file of the tree changes: it is how the
// architecture checklists' "one file plus one row" claims are tested (a
// meter, a collector and a setting in cmd/exporter, a workload kind in
// pkg/workload).
type Overlay struct {
	t       testing.TB
	root    string // the module's root
	dir     string // where the overlay's files are written
	replace map[string]string
}

// NewOverlay starts an empty overlay of the module rooted at root.
func NewOverlay(t testing.TB, root string) *Overlay {
	t.Helper()
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	return &Overlay{t: t, root: abs, dir: t.TempDir(), replace: map[string]string{}}
}

// Add puts a file with content at path (relative to the module's root),
// replacing the tree's file there if there is one.
func (o *Overlay) Add(path string, content []byte) {
	o.t.Helper()
	out := filepath.Join(o.dir, "files", path)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		o.t.Fatal(err)
	}
	if err := os.WriteFile(out, content, 0o644); err != nil {
		o.t.Fatal(err)
	}
	o.replace[filepath.Join(o.root, path)] = out
}

// Patch inserts text into the tree's file at path, before anchor (after it
// when after is set); patches of one file add up. The anchor must occur
// exactly once, so a test whose anchor has moved says so instead of
// patching the wrong place.
func (o *Overlay) Patch(path, anchor, text string, after bool) {
	o.t.Helper()
	from := filepath.Join(o.root, path)
	if patched, ok := o.replace[from]; ok {
		from = patched
	}
	b, err := os.ReadFile(from)
	if err != nil {
		o.t.Fatal(err)
	}
	s := string(b)
	if strings.Count(s, anchor) != 1 {
		o.t.Fatalf("%s: anchor %q not found once; update the test with the checklist it holds", path, anchor)
	}
	i := strings.Index(s, anchor)
	if after {
		i += len(anchor)
	}
	o.Add(path, []byte(s[:i]+text+s[i:]))
}

// Test runs `go test -run ^run$ pkg` (pkg relative to the module's root,
// as ./cmd/exporter) on the module with the overlay, and fails the test
// unless that test passed and the output holds every one of want. It
// returns the output.
func (o *Overlay) Test(pkg, run string, want ...string) string {
	o.t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		o.t.Fatalf("the go command, to build the module with the overlay: %v", err)
	}
	j, err := json.Marshal(map[string]any{"Replace": o.replace})
	if err != nil {
		o.t.Fatal(err)
	}
	ov := filepath.Join(o.dir, "overlay.json")
	if err := os.WriteFile(ov, j, 0o644); err != nil {
		o.t.Fatal(err)
	}
	cmd := exec.Command(goBin, "test", "-count=1", "-v", "-vet=off", "-overlay="+ov, "-run=^"+run+"$", pkg)
	cmd.Dir = o.root
	b, err := cmd.CombinedOutput()
	out := string(b)
	ok := err == nil && strings.Contains(out, "--- PASS: "+run)
	for _, w := range want {
		ok = ok && strings.Contains(out, w)
	}
	if !ok {
		o.t.Fatalf("%s with the overlay (%d files): %v\n%s", run, len(o.replace), err, out)
	}
	return out
}
