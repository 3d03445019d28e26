package node

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/gpu/sysfs/sysfstest"
	"github.com/wattrace/wattrace/pkg/reading"
)

// watts is an amdgpu card's power1_average for w watts.
func watts(w int) map[string]string {
	return map[string]string{"name": "amdgpu\n", "power1_average": itoa(w*1_000_000) + "\n"}
}

func itoa(n int) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		if n /= 10; n == 0 {
			return string(b)
		}
	}
}

// byPCI is each device's reading of an interval, by PCI address.
func byPCI(iv *reading.GPUInterval) map[string]reading.GPUReading {
	out := map[string]reading.GPUReading{}
	for _, d := range iv.Devices {
		out[d.Reading.Device.PCIBusID] = d.Reading
	}
	return out
}

// A card hot-plugged while the source reads another (or whose driver
// bound late) is found at the next rescan, read from that interval on
// (its first reading is its baseline) and counted once per interval: 200
// W a second is 200 J an interval, and the first card's 300 J are
// unchanged. The composition hears of it (OnDevices) once.
func TestCardFoundAfterStart(t *testing.T) {
	tr := sysfstest.NewTree(t)
	tr.Card(0, "0000:0a:00.0", "amdgpu", watts(300))
	g, err := Open(Config{Sysfs: "auto", NVML: "off", SysfsRoot: tr.Sys, ProcfsRoot: tr.Proc, Rescan: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var told [][]reading.GPUDevice
	g.OnDevices(func(d []reading.GPUDevice, _ time.Time) { told = append(told, d) })
	const plugged = 4
	var late float64
	for k := 0; k <= 10; k++ {
		if k == plugged {
			tr.Card(1, "0000:0b:00.0", "amdgpu", watts(200))
		}
		r := byPCI(g.Interval(context.Background(), time.Unix(1000+int64(k), 0)))
		if k > 0 && (!r["0000:0a:00.0"].OK || math.Abs(r["0000:0a:00.0"].EnergyJ-300) > 1e-6) {
			t.Fatalf("interval %d: first card %+v, want 300 J", k, r["0000:0a:00.0"])
		}
		c1, ok := r["0000:0b:00.0"]
		switch {
		case k < plugged && ok:
			t.Fatalf("interval %d: the second card read before it was plugged", k)
		case k == plugged && (!ok || c1.OK || c1.EnergyJ != 0):
			t.Fatalf("interval %d (plugged): %+v, want the card read, its baseline only", k, c1)
		case k > plugged && (!c1.OK || math.Abs(c1.EnergyJ-200) > 1e-6):
			t.Fatalf("interval %d: second card %+v, want 200 J", k, c1)
		}
		late += c1.EnergyJ
	}
	if want := 200.0 * (10 - plugged); math.Abs(late-want) > 1e-6 {
		t.Errorf("the late card counted %.3f J over the run, want %.0f J (200 W from the interval it appeared)", late, want)
	}
	if len(told) != 2 || len(told[0]) != 1 || len(told[1]) != 2 {
		t.Errorf("OnDevices heard %v, want the first card, then both", told)
	}
}

// A node whose GPU is on the PCI bus but served by no driver yet (its
// driver loads late): no source reads anything at start, yet the GPUs
// are kept and pending; when the card appears, the sysfs source is
// opened and the card counted from the interval after it was found. A
// node with no GPU a source could read later has no GPUs to keep.
func TestGPUFoundWhenItsDriverLoads(t *testing.T) {
	tr := sysfstest.NewTree(t)
	tr.PCI("0000:0a:00.0", "0x030000", "0x1002")
	g, err := Open(Config{Sysfs: "auto", NVML: "off", SysfsRoot: tr.Sys, ProcfsRoot: tr.Proc, Rescan: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.Empty() || !g.Pending() || len(g.Devices()) != 0 {
		t.Fatalf("empty %v, pending %v, devices %v: want a kept, pending node without devices", g.Empty(), g.Pending(), g.Devices())
	}
	const loaded = 3
	found := -1
	var counted float64
	for k := 0; k <= 40; k++ {
		if k == loaded {
			tr.Card(0, "0000:0a:00.0", "amdgpu", watts(150))
		}
		r, ok := byPCI(g.Interval(context.Background(), time.Unix(1000+int64(k), 0)))["0000:0a:00.0"]
		switch {
		case ok && k < loaded:
			t.Fatalf("interval %d: read before the driver loaded", k)
		case ok && found < 0:
			found = k
			if r.OK || r.EnergyJ != 0 {
				t.Fatalf("interval %d (found): %+v, want its baseline only", k, r)
			}
		case ok && (!r.OK || math.Abs(r.EnergyJ-150) > 1e-6):
			t.Fatalf("interval %d: %+v, want 150 J", k, r)
		}
		counted += r.EnergyJ
	}
	// Tried again after 1 s, then 2, 4, …: found within the wait after
	// the card appeared.
	if found < loaded || found > 2*loaded+1 {
		t.Fatalf("found at interval %d, want soon after %d", found, loaded)
	}
	if g.Pending() {
		t.Error("still pending with the source open")
	}
	if want := 150.0 * float64(40-found); math.Abs(counted-want) > 1e-6 {
		t.Errorf("counted %.3f J, want %.0f J: 150 W from the interval after it was found", counted, want)
	}

	// A BMC's VGA device, and a GPU bound to vfio-pci (passed through to a
	// VM, which reads it): nothing the host's sources will ever read.
	bare := sysfstest.NewTree(t)
	bare.PCI("0000:02:00.0", "0x030000", "0x1a03")
	bare.PCI("0000:41:00.0", "0x030200", "0x10de")
	bare.Mkdir(filepath.Join(bare.Sys, "bus", "pci", "drivers", "vfio-pci"))
	bare.Link(filepath.Join(bare.Sys, "bus", "pci", "drivers", "vfio-pci"), filepath.Join(bare.Devices, "0000:41:00.0", "driver"))
	h, err := Open(Config{Sysfs: "auto", NVML: "auto", SysfsRoot: bare.Sys, ProcfsRoot: bare.Proc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if !h.Empty() || h.Pending() {
		t.Errorf("a node with a BMC's VGA device and a passed-through GPU: empty %v, pending %v, want empty", h.Empty(), h.Pending())
	}
}
