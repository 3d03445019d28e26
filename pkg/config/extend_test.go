package config

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestExtendWithOneFile holds docs/architecture.md's checklists to their
// word: a meter with a setting is one file plus one row of the meter
// table, and a collector with a setting is one file. It builds the module
// with an overlay (go build -overlay) that adds exactly that to
// pkg/power/discover and pkg/collector (testdata/extend), and runs a test
// in cmd/exporter (testdata/extend/extension_test.go.txt) that loads the
// new settings from a flag, the environment and the file, sees a bad value
// stop start-up naming the key, opens the exporter's parts as build does,
// and finds the meter's energy and the collector's family in the
// registry.
func TestExtendWithOneFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the module again")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	table := filepath.Join(root, "pkg/power/discover/discover.go")
	src, err := os.ReadFile(table)
	if err != nil {
		t.Fatal(err)
	}
	// The one row, placed before hwmon: a platform meter ranks above the
	// ACPI power meter.
	const anchor = "\tPlain(\"hwmon\","
	if strings.Count(string(src), anchor) != 1 {
		t.Fatalf("%s: the meter table has no single hwmon row to insert before", table)
	}
	withRow := strings.Replace(string(src), anchor, "\tRow(\"fixed\", []Role{RolePlatform}, declareFixed, openFixed),\n"+anchor, 1)

	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata/extend", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	overlay := map[string]map[string]string{"Replace": {
		table: write("discover.go", []byte(withRow)),
		filepath.Join(root, "pkg/power/discover/fixed.go"):            write("fixed_meter.go", read("meter.go.txt")),
		filepath.Join(root, "pkg/collector/fixed.go"):                 write("fixed_collector.go", read("collector.go.txt")),
		filepath.Join(root, "cmd/exporter/extension_overlay_test.go"): write("extension_test.go", read("extension_test.go.txt")),
	}}
	b, err := json.Marshal(overlay)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goBin, "test", "-count=1", "-overlay="+write("overlay.json", b), "-run=^TestExtension$", "-v", "./cmd/exporter")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "EXTENSION OK") || !strings.Contains(string(out), "--- PASS: TestExtension") {
		t.Fatalf("the module with one meter file and row and one collector file: %v\n%s", err, out)
	}
}
