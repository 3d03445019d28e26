package measure

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/internal/testenv"
)

// A stalled-PMU verdict makes measure skip the power meter for the rest
// of the boot, so root reads and writes verdicts only in a directory no
// other user can write: another user's directory, one writable by
// others, or a link is not used, and the report says so.
func TestVerdictsOnlyFromOwnDirectory(t *testing.T) {
	testenv.RequireRoot(t)
	old := verdictRoot
	t.Cleanup(func() { verdictRoot = old })
	for _, tc := range []struct {
		name, why string
		make      func(t *testing.T, dir string)
	}{
		{"absent", "", func(*testing.T, string) {}},
		{"own", "", func(t *testing.T, dir string) { mkdirMode(t, dir, 0o755) }},
		{"another user's", "owned by uid 65534", func(t *testing.T, dir string) {
			mkdirMode(t, dir, 0o755)
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}},
		{"writable by everyone", "writable by others", func(t *testing.T, dir string) {
			mkdirMode(t, dir, 0o755)
			if err := os.Chmod(dir, 0o1777); err != nil {
				t.Fatal(err)
			}
		}},
		{"a link", "not a directory", func(t *testing.T, dir string) {
			other := dir + "-elsewhere"
			mkdirMode(t, other, 0o755)
			if err := os.Symlink(other, dir); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			verdictRoot = filepath.Join(t.TempDir(), "wattrace")
			tc.make(t, verdictRoot)
			dir, why := verdictDir()
			if tc.why == "" && (dir != verdictRoot || why != "") || tc.why != "" && (dir != "" || !strings.Contains(why, tc.why)) {
				t.Fatalf("verdictDir() = %q, %q; want %q used, or refused saying %q", dir, why, verdictRoot, tc.why)
			}
			if tc.why == "" {
				return
			}
			rep, code, _ := jsonReport(t, "--accounting=rusage", "--cgroup=none", "--gpu=off", "--power.source=estimator", "--", "true")
			if code != 0 || !strings.Contains(strings.Join(rep.Warnings, "\n"), tc.why) {
				t.Errorf("status %d, warnings %q: want the refusal said", code, rep.Warnings)
			}
		})
	}
}

func mkdirMode(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.Mkdir(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}
