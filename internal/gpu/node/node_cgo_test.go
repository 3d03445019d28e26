//go:build cgo

package node

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/wattrace/wattrace/pkg/gpu"
	"github.com/wattrace/wattrace/pkg/gpu/alloc"
	"github.com/wattrace/wattrace/pkg/gpu/nvml"
)

var t0 = time.Unix(1_700_000_000, 0)

// mockNode wires n mock A100s with total processes spread evenly, at SM
// utilization 10·(1+i%9), an energy counter the caller advances, a
// sampling timestamp the caller advances, and a PCI address 0000:1<i>:00.0.
func mockNode(n, total int) (*server.Server, *[]uint64, *uint64) {
	srv := dgxa100.NewWithGPUs(gpus.Multiple(n, gpus.A100_SXM4_40GB)...)
	energy := make([]uint64, n)
	ts := new(uint64)
	for i := 0; i < n; i++ {
		d := srv.Devices[i].(*server.Device)
		var samples []gonvml.ProcessUtilizationSample
		procs := total / n
		if i < total%n {
			procs++
		}
		for p := 0; p < procs; p++ {
			samples = append(samples, gonvml.ProcessUtilizationSample{Pid: uint32(1000*(i+1) + p), SmUtil: uint32(10 * (1 + p%9))})
		}
		bus := fmt.Sprintf("00000000:%02X:00.0", 0x10+i)
		d.GetPciInfoFunc = func() (gonvml.PciInfo, gonvml.Return) {
			var p gonvml.PciInfo
			for j, c := range bus {
				p.BusId[j] = int8(c)
			}
			return p, gonvml.SUCCESS
		}
		d.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
		d.GpmQueryDeviceSupportFunc = func() (gonvml.GpmSupport, gonvml.Return) {
			return gonvml.GpmSupport{}, gonvml.ERROR_NOT_SUPPORTED
		}
		d.GetTotalEnergyConsumptionFunc = func() (uint64, gonvml.Return) { return energy[i], gonvml.SUCCESS }
		d.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) { return gonvml.Utilization{Gpu: 90}, gonvml.SUCCESS }
		d.GetProcessUtilizationFunc = func(last uint64) ([]gonvml.ProcessUtilizationSample, gonvml.Return) {
			for j := range samples {
				samples[j].TimeStamp = *ts
			}
			return samples, gonvml.SUCCESS
		}
	}
	return srv, &energy, ts
}

type kubelet struct {
	podresources.UnimplementedPodResourcesListerServer
	resp *podresources.ListPodResourcesResponse
}

func (k *kubelet) List(context.Context, *podresources.ListPodResourcesRequest) (*podresources.ListPodResourcesResponse, error) {
	return k.resp, nil
}

// The node's GPUs end to end on mock NVML: GPU 0 held by a pod (through a
// real pod-resources gRPC server), GPU 1 passed through to a VM (libvirt
// status file); every interval reads 300 J per device. The split itself is
// the stats stage's (internal/stats/gpu_test.go).
func TestIntervalWithHolders(t *testing.T) {
	srv, energy, ts := mockNode(2, 6)
	src, err := nvml.New(srv, nvml.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	devs := src.Devices()
	dir := t.TempDir()
	sock := filepath.Join(dir, "kubelet.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	podresources.RegisterPodResourcesListerServer(gs, &kubelet{resp: &podresources.ListPodResourcesResponse{
		PodResources: []*podresources.PodResources{{Name: "p", Namespace: "ns", Containers: []*podresources.ContainerResources{
			{Name: "c", Devices: []*podresources.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{devs[0].UUID}}}},
		}}}}})
	go gs.Serve(l)
	defer gs.Stop()
	run := filepath.Join(dir, "run")
	os.MkdirAll(run, 0o755)
	os.WriteFile(filepath.Join(run, "vm1.xml"), []byte(`<domstatus><domain id='1'><name>vm1</name><uuid>u-1</uuid><devices>
<hostdev mode='subsystem' type='pci'><source><address domain='0x0000' bus='0x11' slot='0x00' function='0x0'/></source></hostdev>
</devices></domain></domstatus>`), 0o644)
	k, err := alloc.NewKubelet(sock, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	cfg := Config{IdlePolicy: "holder", IdleWatts: map[string]float64{devs[0].UUID: 55}}
	g := New(cfg, []gpu.Source{src}, []alloc.Source{&alloc.Libvirt{RunDir: run, SysfsRoot: dir}, k}, nil)
	for i := 0; i <= 10; i++ {
		for j := range *energy {
			(*energy)[j] += 300_000
		}
		*ts += 1_000_000
		iv := g.Interval(context.Background(), t0.Add(time.Duration(i)*time.Second))
		if len(iv.Devices) != 2 || len(iv.Health) != 4 {
			t.Fatalf("%+v", iv)
		}
		for _, h := range iv.Health {
			if !h.Up {
				t.Fatalf("health %+v", iv.Health)
			}
		}
		if i == 0 {
			continue
		}
		d0, d1 := iv.Devices[0], iv.Devices[1]
		if !d0.HasHolder || d0.Holder.Pod != "p" || d0.Whole || !d0.Reading.OK || math.Abs(d0.Reading.EnergyJ-300) > 300e-9 {
			t.Fatalf("GPU 0: %+v", d0)
		}
		if !d1.HasHolder || d1.Holder.VMName != "vm1" || !d1.Whole || math.Abs(d1.Reading.EnergyJ-300) > 300e-9 {
			t.Fatalf("GPU 1: %+v", d1)
		}
		if len(d0.Reading.Usage) != 3 {
			t.Fatalf("GPU 0 usage %v", d0.Reading.Usage)
		}
	}
	if g.Config().IdleWatts[devs[0].UUID] != 55 {
		t.Error("config not kept for the stats stage")
	}
}

// BenchmarkInterval8GPUs100Procs: 8 mock GPUs with 100 GPU processes
// between them (13 on four, 12 on the others), read, resolved and split per op. The
// mock answers at no cost, so this is wattrace's own CPU per interval;
// a real NVML adds its ioctls (per device, not per process).
func BenchmarkInterval8GPUs100Procs(b *testing.B) {
	srv, energy, ts := mockNode(8, 100)
	src, err := nvml.New(srv, nvml.Options{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	g := New(Config{}, []gpu.Source{src}, nil, nil)
	now := t0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range *energy {
			(*energy)[j] += 300_000
		}
		*ts += 1_000_000
		now = now.Add(time.Second)
		iv := g.Interval(context.Background(), now)
		if len(iv.Devices) != 8 {
			b.Fatal(len(iv.Devices))
		}
	}
}

// NVIDIA's driver loading after start: NVML's library is there but its
// Init says the driver is not loaded, so no source reads the board at
// Open; the board is on the PCI bus, so the GPUs are kept and NVML is
// tried again. Once the driver is up the board is read from the interval
// it is found (its baseline) and counted once: 300 J an interval.
func TestNVMLFoundWhenItsDriverLoads(t *testing.T) {
	srv, energy, ts := mockNode(1, 2)
	loaded := false
	init := srv.InitFunc
	srv.InitFunc = func() gonvml.Return {
		if !loaded {
			return gonvml.ERROR_DRIVER_NOT_LOADED
		}
		return init()
	}
	old := openNVML
	openNVML = func(o nvml.Options, log *zap.Logger) (gpu.Source, error) { return nvml.OpenLib(srv, o, log) }
	t.Cleanup(func() { openNVML = old })
	sys := t.TempDir()
	dev := filepath.Join(sys, "devices", "pci0000:00", "0000:10:00.0")
	for f, v := range map[string]string{"class": "0x030200\n", "vendor": "0x10de\n"} {
		if err := os.MkdirAll(dev, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dev, f), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(sys, "bus", "pci", "devices"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dev, filepath.Join(sys, "bus", "pci", "devices", "0000:10:00.0")); err != nil {
		t.Fatal(err)
	}
	g, err := Open(Config{NVML: "auto", Sysfs: "off", SysfsRoot: sys, Rescan: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if g.Empty() || !g.Pending() {
		t.Fatalf("empty %v, pending %v: want the GPUs kept, pending", g.Empty(), g.Pending())
	}
	found := -1
	var counted float64
	for k := 0; k <= 20; k++ {
		if k == 3 {
			loaded = true
		}
		(*energy)[0] += 300_000
		*ts += 1_000_000
		iv := g.Interval(context.Background(), t0.Add(time.Duration(k)*time.Second))
		switch {
		case len(iv.Devices) == 0:
			if found >= 0 {
				t.Fatalf("interval %d: the board went away", k)
			}
			continue
		case k < 3:
			t.Fatalf("interval %d: read before the driver loaded", k)
		case found < 0:
			found = k
			if r := iv.Devices[0].Reading; r.OK {
				t.Fatalf("interval %d (found): %+v, want its baseline only", k, r)
			}
			continue
		}
		r := iv.Devices[0].Reading
		if !r.OK || math.Abs(r.EnergyJ-300) > 300e-9 {
			t.Fatalf("interval %d: %+v, want 300 J", k, r)
		}
		counted += r.EnergyJ
	}
	if found < 3 || found > 7 {
		t.Fatalf("found at interval %d, want soon after the driver loaded at 3", found)
	}
	if want := 300.0 * float64(20-found); math.Abs(counted-want) > 1e-6 {
		t.Errorf("counted %.3f J, want %.0f J", counted, want)
	}
}
