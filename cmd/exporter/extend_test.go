package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/wattrace/wattrace/internal/testenv"
)

// TestExtendWithOneFile holds docs/architecture.md's checklists to their
// word: a meter with a setting is one file plus one row of the meter
// table, a collector with a setting is one file, and any other setting is
// a field and one line in the Declare of the block its user reads (here
// the GPU sources' node.Config), with nothing in cmd/exporter. It builds
// the module with an overlay (go build -overlay) that adds exactly that to
// pkg/power/discover, internal/collector and internal/gpu/node (testdata/extend),
// and runs a test in cmd/exporter (testdata/extend/extension_test.go.txt)
// that loads the new settings from a flag, the environment and the file,
// sees a bad value stop start-up naming the key, opens the exporter's
// parts as build does, and finds the meter's energy and the collector's
// family in the registry.
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
	o.Add("internal/collector/fixed.go", read("collector.go.txt"))
	// The setting: its field in the block, its line in the block's
	// Declare.
	o.Patch("internal/gpu/node/config.go", "\tLibvirtRunDir string\n", "\t// Example is gpu.example.\n\tExample int\n", true)
	o.Patch("internal/gpu/node/config.go", "\ts.String(&c.LibvirtRunDir, KeyLibvirtRunDir,",
		"\ts.Int(&c.Example, \"gpu.example\", 4, \"An example setting.\", 1, \"must be >= 1\")\n", false)
	o.Add("cmd/exporter/extension_overlay_test.go", read("extension_test.go.txt"))
	o.Test("./cmd/exporter", "TestExtension", "EXTENSION OK")
}
