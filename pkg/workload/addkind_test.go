package workload

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/wattrace/wattrace/internal/testenv"
)

// TestAddKind holds docs/architecture.md's add-a-kind checklist to its
// word: it adds a level "toy" with only a Kind constant and a kinds table
// row, its path grammar in the row (testdata/addkind), through `go test
// -overlay` so that no file of the tree changes, and runs
// testdata/addkind/toykind_test.go.txt against the result. That test needs
// the flag, the parse, the roll-up's series, the GPU holder match and the
// Alloy target of the new level to work; any other file a new kind had to
// touch, the parser's included, would fail it.
func TestAddKind(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the exporter's packages again")
	}
	snippet := func(name string) string {
		b, err := os.ReadFile(filepath.Join("testdata", "addkind", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	o := testenv.NewOverlay(t, filepath.Join("..", ".."))
	o.Patch("pkg/workload/ident/identity.go", "KindSystemdUnit Kind = \"unit\"\n", snippet("kind.go.txt"), true)
	o.Patch("pkg/workload/ident/kinds.go", "\n}\n\n// kindTable answers", snippet("row.go.txt"), false)
	o.Add("pkg/workload/toykind_test.go", []byte(snippet("toykind_test.go.txt")))
	t.Logf("%s", o.Test("./pkg/workload/", "TestToyKind"))
}
