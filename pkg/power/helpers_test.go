package power

import (
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// copyFixture copies testdata/<name> into a fresh temp dir and returns its
// root. "%3A" in names becomes ":" (see testdata/README.md for why the
// fixtures cannot contain colons).
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	src := filepath.Join("testdata", name)
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
		t.Fatalf("copy fixture %s: %v", name, err)
	}
	return dst
}

// writeZone creates (or overwrites) one powercap zone directory.
func writeZone(t *testing.T, root, dir, name string, energyUJ, maxUJ uint64) {
	t.Helper()
	zdir := filepath.Join(root, "class", "powercap", dir)
	if err := os.MkdirAll(zdir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(zdir, "name"), name+"\n")
	writeFile(t, filepath.Join(zdir, "max_energy_range_uj"), strconv.FormatUint(maxUJ, 10)+"\n")
	setEnergy(t, root, dir, energyUJ)
}

// setEnergy rewrites a zone's energy_uj the way the kernel formats it.
func setEnergy(t *testing.T, root, dir string, uj uint64) {
	t.Helper()
	writeFile(t, filepath.Join(root, "class", "powercap", dir, "energy_uj"), strconv.FormatUint(uj, 10)+"\n")
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustRead(t *testing.T, m Meter) []ZoneSample {
	t.Helper()
	s, err := m.Read()
	if err != nil {
		t.Fatalf("%s Read: %v", m.Name(), err)
	}
	return s
}

// joulesOf finds the sample for (zone, socket) and fails if absent.
func joulesOf(t *testing.T, samples []ZoneSample, zone string, socket int) float64 {
	t.Helper()
	for _, s := range samples {
		if s.Zone == zone && s.Socket == socket {
			return s.Joules
		}
	}
	t.Fatalf("no sample for zone %q socket %d in %+v", zone, socket, samples)
	return 0
}
