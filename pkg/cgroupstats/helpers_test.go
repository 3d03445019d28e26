package cgroupstats

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// copyFixture copies testdata into a fresh temp dir and returns its root.
// "%3A" in names becomes ":" (see testdata/README.md for why the fixtures
// cannot contain colons).
func copyFixture(t testing.TB) string {
	t.Helper()
	const src = "testdata"
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, strings.ReplaceAll(rel, "%3A", ":"))
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy fixture: %v", err)
	}
	return dst
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
