package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/wattrace/wattrace/internal/testenv"
)

// TestExtendWithOneLine holds docs/architecture.md's "Add a setting"
// checklist to its word for this server as for the exporter: a setting
// is a field and one line in the Declare of the block its user reads
// (here the updater's updater.Config), with nothing in cmd/wattrace-api.
// It builds the module with an overlay (go build -overlay) that adds
// exactly that to internal/units/updater, and runs a test in
// cmd/wattrace-api (testdata/extend/extension_test.go.txt) that finds the
// flag with its default and help, loads the value from the environment,
// the file and a flag into the updater's configuration, and sees a bad
// value stop start-up naming the key.
func TestExtendWithOneLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the module again")
	}
	b, err := os.ReadFile(filepath.Join("testdata/extend", "extension_test.go.txt"))
	if err != nil {
		t.Fatal(err)
	}
	o := testenv.NewOverlay(t, filepath.Join("..", ".."))
	o.Patch("internal/units/updater/updater.go", "\t// Now is the clock (tests); time.Now when nil.\n", "\t// Example is updater.example.\n\tExample int\n", false)
	o.Patch("internal/units/updater/settings.go", "\ts.AnyDuration(&c.SeriesRetention, KeySeriesRetention,",
		"\ts.Int(&c.Example, \"updater.example\", 4, \"An example setting.\", 1, \"must be >= 1\")\n", false)
	o.Add("cmd/wattrace-api/extension_overlay_test.go", b)
	o.Test("./cmd/wattrace-api", "TestExtension", "EXTENSION OK")
}
