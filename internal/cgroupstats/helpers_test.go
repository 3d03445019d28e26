package cgroupstats

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/wattrace/wattrace/internal/testenv"
)

// copyFixture copies testdata into a fresh temp dir and returns its root
// (see testenv.CopyFixture).
func copyFixture(t testing.TB) string {
	t.Helper()
	return testenv.CopyFixture(t, "testdata")
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fixtureLayout is the layout of the copied fixture: the v1 controllers
// named, each under cgroup-v1/<name>, plus cgroup-v2 when v2 is set.
func fixtureLayout(root string, v2 bool, v1 ...string) Layout {
	l := Layout{V1Roots: map[string]string{}}
	for _, c := range v1 {
		l.V1Roots[c] = filepath.Join(root, "cgroup-v1", c)
	}
	if v2 {
		l.V2Root = filepath.Join(root, "cgroup-v2")
	}
	return l
}

var allV1 = []string{"cpuacct", "memory", "blkio", "pids"}
