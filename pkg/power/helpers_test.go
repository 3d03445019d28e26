package power

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/reading"
)

// copyFixture copies testdata/<name> into a fresh temp dir and returns its
// root (see testenv.CopyFixture).
func copyFixture(t *testing.T, name string) string {
	t.Helper()
	return testenv.CopyFixture(t, filepath.Join("testdata", name))
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

func mustRead(t *testing.T, m Meter) []reading.ZoneSample {
	t.Helper()
	s, err := m.Read(context.Background())
	if err != nil {
		t.Fatalf("%s Read: %v", m.Name(), err)
	}
	return s
}

// joulesOf finds the sample for (zone, socket) and fails if absent.
func joulesOf(t *testing.T, samples []reading.ZoneSample, zone string, socket int) float64 {
	t.Helper()
	for _, s := range samples {
		if s.Zone == zone && s.Socket == socket {
			return s.Joules
		}
	}
	t.Fatalf("no sample for zone %q socket %d in %+v", zone, socket, samples)
	return 0
}

// tick is a clock that moves step forward at each call: meters validate
// counters against a power ceiling over elapsed time, so tests read them
// one simulated second apart.
type tick struct {
	t    time.Time
	step time.Duration
}

func newTick() *tick { return &tick{t: time.Unix(1_700_000_000, 0), step: time.Second} }

func (c *tick) now() time.Time { c.t = c.t.Add(c.step); return c.t }

// testRAPL is NewRAPL on a ticking clock.
func testRAPL(root string) (*RAPL, error) {
	r, _, err := testRAPLClock(root, MeterOptions{})
	return r, err
}

func testRAPLClock(root string, o MeterOptions) (*RAPL, *tick, error) {
	c := newTick()
	o.Now = c.now
	r, err := newRAPL(root, os.ReadFile, o)
	return r, c, err
}
