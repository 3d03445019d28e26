package workload

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestAddKind holds docs/architecture.md's add-a-kind checklist to its
// word: it adds a level "toy" with only a Kind constant, a kinds table row
// and a parse case (testdata/addkind), through `go test -overlay` so that
// no file of the tree changes, and runs testdata/addkind/toykind_test.go.txt
// against the result. That test needs the flag, the parse, the roll-up's
// series, the GPU holder match and the Alloy target of the new level to
// work; any other file a new kind had to touch would fail it.
func TestAddKind(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the exporter's packages again")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	snippet := func(name string) string {
		b, err := os.ReadFile(filepath.Join("testdata", "addkind", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tmp := t.TempDir()
	overlay := map[string]string{}
	// patch writes file with snippet inserted before anchor (after it
	// when after is set) into the overlay.
	patch := func(file, anchor, text string, after bool) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		i := strings.Index(s, anchor)
		if i < 0 || strings.Count(s, anchor) != 1 {
			t.Fatalf("%s: anchor %q not found once; update TestAddKind with the checklist", file, anchor)
		}
		if after {
			i += len(anchor)
		}
		out := filepath.Join(tmp, file)
		if err := os.WriteFile(out, []byte(s[:i]+text+s[i:]), 0o644); err != nil {
			t.Fatal(err)
		}
		abs, _ := filepath.Abs(file)
		overlay[abs] = out
	}
	patch("identity.go", "KindSystemdUnit Kind = \"unit\"\n", snippet("kind.go.txt"), true)
	patch("kinds.go", "\n}\n\n// kindTable answers", snippet("row.go.txt"), false)
	patch("parse.go", "\t\t// systemd units, weakest.", snippet("parse.go.txt"), false)
	testFile := filepath.Join(tmp, "toykind_test.go")
	if err := os.WriteFile(testFile, []byte(snippet("toykind_test.go.txt")), 0o644); err != nil {
		t.Fatal(err)
	}
	here, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	overlay[filepath.Join(here, "toykind_test.go")] = testFile
	j, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ov, j, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goBin, "test", "-count=1", "-v", "-vet=off", "-overlay="+ov, "-run=^TestToyKind$", "./pkg/workload/")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestToyKind") {
		t.Fatalf("the toy kind's test failed: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
