package power

import (
	"context"
	"errors"
	"github.com/wattrace/wattrace/pkg/reading"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// maxPkgUJ is a real Intel package max_energy_range_uj (2^32 units of
// 61.035 µJ); maxDRAMUJ a real DRAM/AMD one.
const (
	maxPkgUJ  = 262143328850
	maxDRAMUJ = 65712999613
)

func TestRAPLOneSocket(t *testing.T) {
	root := copyFixture(t, "rapl-1socket")
	r, err := testRAPL(root)
	if err != nil {
		t.Fatal(err)
	}
	if r.Name() != "rapl" || r.Estimated() {
		t.Fatalf("Name/Estimated = %q/%v, want rapl/false", r.Name(), r.Estimated())
	}

	first := mustRead(t, r)
	want := []reading.ZoneSample{
		{Zone: "package", Socket: 0},
		{Zone: "core", Socket: 0},
		{Zone: "uncore", Socket: 0},
	}
	// Exactly these three: the intel-rapl-mmio:0 duplicate is skipped.
	if !reflect.DeepEqual(first, want) {
		t.Fatalf("first Read = %+v, want %+v (all zero, no mmio duplicate)", first, want)
	}

	setEnergy(t, root, "intel-rapl:0", 12000000+10000000) // +10 J
	setEnergy(t, root, "intel-rapl:0:0", 5000000+4000000) // +4 J
	setEnergy(t, root, "intel-rapl:0:1", 300000+500000)   // +0.5 J
	setEnergy(t, root, "intel-rapl-mmio:0", 99000000)     // must not count
	got := mustRead(t, r)
	want = []reading.ZoneSample{
		{Zone: "package", Socket: 0, Joules: 10},
		{Zone: "core", Socket: 0, Joules: 4},
		{Zone: "uncore", Socket: 0, Joules: 0.5},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("second Read = %+v, want %+v", got, want)
	}

	// An unchanged counter adds nothing; the totals stay cumulative.
	if got := mustRead(t, r); !reflect.DeepEqual(got, want) {
		t.Fatalf("third Read = %+v, want %+v", got, want)
	}
}

func TestRAPLWraparoundExact(t *testing.T) {
	root := t.TempDir()
	writeZone(t, root, "intel-rapl:0", "package-0", maxPkgUJ-328850, maxPkgUJ)
	r, clock, err := testRAPLClock(root, MeterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, r)

	// Wrap: 328850 µJ up to max, then 500000 µJ past zero.
	setEnergy(t, root, "intel-rapl:0", 500000)
	if got, want := joulesOf(t, mustRead(t, r), "package", 0), 0.82885; got != want {
		t.Fatalf("after wrap: %v J, want %v J", got, want)
	}
	// A normal step after the wrap keeps accumulating exactly (integer µJ
	// inside, so no float drift).
	setEnergy(t, root, "intel-rapl:0", 1500000)
	if got, want := joulesOf(t, mustRead(t, r), "package", 0), 1.82885; got != want {
		t.Fatalf("after wrap and step: %v J, want %v J", got, want)
	}
	// Wrapping from exactly max to exactly 0 counts as 0 by the formula
	// max - prev + cur. Climbing to the top at a plausible power takes
	// time: 262 kJ at under 1 kW.
	clock.step = 300 * time.Second
	setEnergy(t, root, "intel-rapl:0", maxPkgUJ)
	mustRead(t, r)
	clock.step = time.Second
	setEnergy(t, root, "intel-rapl:0", 0)
	wantTotal := float64(1828850+(maxPkgUJ-1500000)) / 1e6
	if got := joulesOf(t, mustRead(t, r), "package", 0); got != wantTotal {
		t.Fatalf("after max->0: %v J, want %v J", got, wantTotal)
	}
}

func TestRAPLTwoSockets(t *testing.T) {
	root := copyFixture(t, "rapl-2socket")
	r, err := testRAPL(root)
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, r)
	setEnergy(t, root, "intel-rapl:0", 40000000+1000000)  // socket 0 package +1 J
	setEnergy(t, root, "intel-rapl:0:0", 8000000+250000)  // socket 0 dram +0.25 J
	setEnergy(t, root, "intel-rapl:1", 41000000+7000000)  // socket 1 package +7 J
	setEnergy(t, root, "intel-rapl:1:0", 9000000+2000000) // socket 1 dram +2 J
	got := mustRead(t, r)
	want := []reading.ZoneSample{
		{Zone: "package", Socket: 0, Joules: 1},
		{Zone: "dram", Socket: 0, Joules: 0.25},
		{Zone: "package", Socket: 1, Joules: 7},
		{Zone: "dram", Socket: 1, Joules: 2},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Read = %+v, want %+v", got, want)
	}
}

// The socket comes from "package-N", not from the intel-rapl:N index.
func TestRAPLSocketFromName(t *testing.T) {
	root := copyFixture(t, "rapl-2socket")
	pc := filepath.Join(root, "class", "powercap")
	writeFile(t, filepath.Join(pc, "intel-rapl:0", "name"), "package-1\n")
	writeFile(t, filepath.Join(pc, "intel-rapl:1", "name"), "package-0\n")
	r, err := testRAPL(root)
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, r)
	setEnergy(t, root, "intel-rapl:0", 40000000+3000000)  // directory 0 = socket 1
	setEnergy(t, root, "intel-rapl:0:0", 8000000+1000000) // its dram: socket 1
	got := mustRead(t, r)
	if j := joulesOf(t, got, "package", 1); j != 3 {
		t.Errorf("socket 1 package = %v J, want 3", j)
	}
	if j := joulesOf(t, got, "dram", 1); j != 1 {
		t.Errorf("socket 1 dram = %v J, want 1", j)
	}
	if j := joulesOf(t, got, "package", 0); j != 0 {
		t.Errorf("socket 0 package = %v J, want 0", j)
	}
}

func TestRAPLPsysAndDRAM(t *testing.T) {
	root := copyFixture(t, "rapl-psys-dram")
	r, err := testRAPL(root)
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, r)
	setEnergy(t, root, "intel-rapl:1", 15000000+20000000) // psys +20 J
	setEnergy(t, root, "intel-rapl:0:2", 900000+1500000)  // dram +1.5 J
	got := mustRead(t, r)
	want := []reading.ZoneSample{
		{Zone: "psys", Socket: -1, Joules: 20},
		{Zone: "package", Socket: 0},
		{Zone: "core", Socket: 0},
		{Zone: "uncore", Socket: 0},
		{Zone: "dram", Socket: 0, Joules: 1.5},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Read = %+v, want %+v", got, want)
	}
}

func TestRAPLAMDPrefix(t *testing.T) {
	root := copyFixture(t, "rapl-amd")
	r, err := testRAPL(root)
	if err != nil {
		t.Fatal(err)
	}
	setEnergy(t, root, "amd-rapl:0", maxDRAMUJ-1000)
	mustRead(t, r)
	setEnergy(t, root, "amd-rapl:0", 500) // wrapped: 1000 + 500 µJ
	setEnergy(t, root, "amd-rapl:0:0", 1000000+125000)
	got := mustRead(t, r)
	want := []reading.ZoneSample{
		{Zone: "package", Socket: 0, Joules: 0.0015},
		{Zone: "core", Socket: 0, Joules: 0.125},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Read = %+v, want %+v", got, want)
	}
}

// intel-rapl zones win over amd-rapl ones so no socket is counted twice.
func TestRAPLPrefersIntelPrefix(t *testing.T) {
	root := t.TempDir()
	writeZone(t, root, "intel-rapl:0", "package-0", 0, maxPkgUJ)
	writeZone(t, root, "amd-rapl:0", "package-0", 0, maxPkgUJ)
	r, err := testRAPL(root)
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, r)
	setEnergy(t, root, "intel-rapl:0", 2000000)
	setEnergy(t, root, "amd-rapl:0", 5000000)
	if got := mustRead(t, r); !reflect.DeepEqual(got, []reading.ZoneSample{{Zone: "package", Socket: 0, Joules: 2}}) {
		t.Fatalf("Read = %+v, want only intel-rapl:0's 2 J", got)
	}
}

// Multi-die packages report one counter per die; they sum into the socket.
func TestRAPLDiesMergeIntoSocket(t *testing.T) {
	root := t.TempDir()
	writeZone(t, root, "intel-rapl:0", "package-0-die-0", 0, maxPkgUJ)
	writeZone(t, root, "intel-rapl:1", "package-0-die-1", 0, maxPkgUJ)
	writeZone(t, root, "intel-rapl:1:0", "dram", 0, maxDRAMUJ)
	writeZone(t, root, "intel-rapl:2", "package-1-die-0", 0, maxPkgUJ)
	writeZone(t, root, "intel-rapl:3", "unknown-zone", 0, maxPkgUJ) // ignored
	r, err := testRAPL(root)
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, r)
	setEnergy(t, root, "intel-rapl:0", 1000000)
	setEnergy(t, root, "intel-rapl:1", 2500000)
	setEnergy(t, root, "intel-rapl:1:0", 500000)
	setEnergy(t, root, "intel-rapl:2", 4000000)
	setEnergy(t, root, "intel-rapl:3", 9000000)
	got := mustRead(t, r)
	want := []reading.ZoneSample{
		{Zone: "package", Socket: 0, Joules: 3.5},
		{Zone: "dram", Socket: 0, Joules: 0.5},
		{Zone: "package", Socket: 1, Joules: 4},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Read = %+v, want %+v", got, want)
	}
}

func TestRAPLPermissionDenied(t *testing.T) {
	for _, errno := range []syscall.Errno{syscall.EACCES, syscall.EPERM} {
		t.Run(errno.Error(), func(t *testing.T) {
			root := copyFixture(t, "rapl-1socket")
			// Tests run as root, so chmod 000 would not stop the read;
			// inject the error the kernel returns to an unprivileged user.
			denied := func(path string) ([]byte, error) {
				if filepath.Base(path) == "energy_uj" {
					return nil, &fs.PathError{Op: "open", Path: path, Err: errno}
				}
				return os.ReadFile(path)
			}
			r, err := newRAPL(root, denied, MeterOptions{})
			if err != nil {
				t.Fatalf("discovery must not need energy_uj: %v", err)
			}
			_, err = r.Read(context.Background())
			if err == nil {
				t.Fatal("Read succeeded, want permission error")
			}
			if !errors.Is(err, fs.ErrPermission) {
				t.Errorf("errors.Is(err, fs.ErrPermission) = false for %v", err)
			}
			path := filepath.Join(root, "class", "powercap", "intel-rapl:0", "energy_uj")
			msg := err.Error()
			t.Log(msg)
			for _, want := range []string{
				"read " + path + ": ",
				"root",
				"5.10",
				"CVE-2020-8694",
				"CAP_DAC_READ_SEARCH",
				"udev",
				"/bin/chgrp wattrace " + path,
			} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not mention %q", msg, want)
				}
			}
		})
	}
}

func TestRAPLMalformedEnergy(t *testing.T) {
	root := copyFixture(t, "rapl-1socket")
	r, err := testRAPL(root)
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, r)

	path := filepath.Join(root, "class", "powercap", "intel-rapl:0:1", "energy_uj")
	setEnergy(t, root, "intel-rapl:0", 12000000+1000000)
	writeFile(t, path, "12ab\n")
	// One garbage file costs only its zone, and shows: up=0, one error,
	// one rejected reading of reason "unreadable".
	got := mustRead(t, r)
	if j := joulesOf(t, got, "package", 0); j != 1 {
		t.Errorf("package = %v J, want 1", j)
	}
	h := r.Health()[0]
	if h.Up || h.Errors != 1 || h.Reads != 2 || h.Rejected["unreadable"] != 1 {
		t.Fatalf("health after garbage: %+v, want up=0 errors=1 reads=2 rejected{unreadable}=1", h)
	}

	// The zone's baseline is kept: once the file is sane again, the next
	// Read accounts for the whole gap.
	setEnergy(t, root, "intel-rapl:0:1", 300000+200000)
	got = mustRead(t, r)
	if j := joulesOf(t, got, "package", 0); j != 1 {
		t.Errorf("package = %v J, want 1", j)
	}
	if j := joulesOf(t, got, "uncore", 0); j != 0.2 {
		t.Errorf("uncore = %v J, want 0.2", j)
	}
	if h := r.Health()[0]; !h.Up || h.Errors != 1 || h.Reads != 3 {
		t.Fatalf("health after recovery: %+v", h)
	}

	// Every file missing: Read fails, and the zones never move.
	for _, z := range []string{"intel-rapl:0", "intel-rapl:0:0", "intel-rapl:0:1"} {
		os.Remove(filepath.Join(root, "class", "powercap", z, "energy_uj"))
	}
	if _, err := r.Read(context.Background()); err == nil || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Read with every energy_uj missing: %v", err)
	}
	if h := r.Health()[0]; h.Up || h.Errors != 2 {
		t.Fatalf("health with files missing: %+v", h)
	}
}

func TestRAPLCounterAboveMax(t *testing.T) {
	root := t.TempDir()
	writeZone(t, root, "intel-rapl:0", "package-0", maxPkgUJ+1, maxPkgUJ)
	r, err := testRAPL(root)
	if err != nil {
		t.Fatal(err)
	}
	if j := joulesOf(t, mustRead(t, r), "package", 0); j != 0 {
		t.Fatalf("package = %v J", j)
	}
	if got := r.Health()[0].Rejected["out_of_range"]; got != 1 {
		t.Fatalf("rejected out_of_range = %d, want 1", got)
	}
}

func TestNewRAPLErrors(t *testing.T) {
	t.Run("no powercap", func(t *testing.T) {
		_, err := NewRAPL(t.TempDir())
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("err = %v, want wrapped ErrNotExist", err)
		}
	})
	t.Run("only mmio and control type", func(t *testing.T) {
		root := t.TempDir()
		writeZone(t, root, "intel-rapl-mmio:0", "package-0", 0, maxPkgUJ)
		if err := os.MkdirAll(filepath.Join(root, "class", "powercap", "intel-rapl"), 0o755); err != nil {
			t.Fatal(err)
		}
		_, err := testRAPL(root)
		if err == nil || !strings.Contains(err.Error(), "no RAPL zones") {
			t.Fatalf("err = %v, want no RAPL zones", err)
		}
	})
	t.Run("malformed max range", func(t *testing.T) {
		root := t.TempDir()
		writeZone(t, root, "intel-rapl:0", "package-0", 0, maxPkgUJ)
		path := filepath.Join(root, "class", "powercap", "intel-rapl:0", "max_energy_range_uj")
		writeFile(t, path, "-5\n")
		_, err := testRAPL(root)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), `"-5"`) {
			t.Fatalf("err = %v, want error naming %s and \"-5\"", err, path)
		}
	})
}

func TestParseUint(t *testing.T) {
	good := map[string]uint64{
		"0\n":                    0,
		"262143328850\n":         262143328850,
		" 42 ":                   42,
		"18446744073709551615\n": 18446744073709551615,
	}
	for in, want := range good {
		got, err := parseUint([]byte(in))
		if err != nil || got != want {
			t.Errorf("parseUint(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "\n", "-1", "+1", "1.5", "0x10", "12ab", "1 2", "18446744073709551616"} {
		if v, err := parseUint([]byte(in)); err == nil {
			t.Errorf("parseUint(%q) = %d, want error", in, v)
		}
	}
}

func FuzzParseUint(f *testing.F) {
	for _, s := range []string{"0\n", "262143328850\n", "", "-1", "12ab", "18446744073709551616", " 7 "} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseUint(b)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		// Whatever parsed must be a plain decimal that round-trips.
		again, err := parseUint([]byte(strconv.FormatUint(v, 10)))
		if err != nil || again != v {
			t.Fatalf("round trip of %d: %d, %v", v, again, err)
		}
		if strings.TrimLeft(strings.TrimSpace(string(b)), "0") != strings.TrimLeft(strconv.FormatUint(v, 10), "0") {
			t.Fatalf("parseUint(%q) = %d: digits differ", b, v)
		}
	})
}
