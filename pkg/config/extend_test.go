package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/wattrace/wattrace/internal/testenv"
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
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("testdata/extend", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	o := testenv.NewOverlay(t, filepath.Join("..", ".."))
	// The one row, placed before hwmon: a platform meter ranks above the
	// ACPI power meter.
	o.Patch("pkg/power/discover/discover.go", "\tPlain(\"hwmon\",", "\tRow(\"fixed\", []Role{RolePlatform}, declareFixed, openFixed),\n", false)
	o.Add("pkg/power/discover/fixed.go", read("meter.go.txt"))
	o.Add("pkg/collector/fixed.go", read("collector.go.txt"))
	o.Add("cmd/exporter/extension_overlay_test.go", read("extension_test.go.txt"))
	o.Test("./cmd/exporter", "TestExtension", "EXTENSION OK")
}
