package stats

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// vmResolver resolves docs/vm.md's example host: vm-a (4 vCPUs, 8 GiB),
// vm-b (2 vCPUs, 24 GiB, or nothing known when bare), and a host daemon.
type vmResolver struct{ bare bool }

func (vmResolver) Sweep() int { return 0 }

func (r vmResolver) Resolve(path string) ident.Identity {
	for _, vm := range []struct {
		name   string
		vcpus  int
		memKiB uint64
	}{{"vm-a", 4, 8 << 20}, {"vm-b", 2, 24 << 20}} {
		if strings.HasPrefix(path, "/machine.slice/"+vm.name+".scope") {
			id := ident.Identity{Kind: ident.KindVM, Manager: "libvirt", ID: vm.name, Name: vm.name, VMName: vm.name}
			if !(r.bare && vm.name == "vm-b") {
				id.VMVCPUs, id.VMMemoryKiB = vm.vcpus, vm.memKiB
			}
			return id
		}
	}
	return ident.Identity{Kind: ident.KindSystemdUnit, ID: path}
}

// docs/vm.md's worked example: a 10 s interval of 1000 J with 60 W idle
// (600 J), vm-a busy on its emulator and two vCPUs, vm-b idle, a busy host
// daemon. Each VM's idle joules are the doc's under each split, the
// daemon's none; vcpus with vm-b's allocation unknown falls back to even.
func TestVMIdleSplitWorkedExample(t *testing.T) {
	const (
		a   = "/machine.slice/vm-a.scope"
		b   = "/machine.slice/vm-b.scope"
		dmn = "/system.slice/backup.service"
	)
	paths := names{1: a, 2: a + "/libvirt/emulator", 3: a + "/libvirt/vcpu0", 4: a + "/libvirt/vcpu1",
		5: b, 6: b + "/libvirt/emulator", 7: b + "/libvirt/vcpu0", 8: dmn}
	for _, tc := range []struct {
		split    string
		bare     bool
		vmA, vmB float64
	}{
		{"even", false, 300, 300},
		{"vcpus", false, 400, 200},
		{"memory", false, 150, 450},
		{"vcpus", true, 300, 300},
	} {
		src := &fakeSource{}
		for id := uint64(1); id <= 8; id++ {
			src.add(id, uint32(100+id), 0, 0)
		}
		m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: -1, Joules: 0}}}
		l, err := New(Config{Interval: 10 * time.Second, IdlePolicy: "even", VMIdleSplit: tc.split, CPUs: 4,
			IdleWatts: map[string]float64{"package": 60}}, src, m, paths, nil,
			WithWorkloads(vmResolver{bare: tc.bare}, []ident.Kind{ident.KindVM}))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Unix(1000, 0)
		l.Step(now)
		src.add(2, 102, 0, 1e9)
		src.add(3, 103, 0, 8e9)
		src.add(4, 104, 0, 8e9)
		src.add(8, 108, 0, 5e9)
		m.samples[0].Joules = 1000
		l.Step(now.Add(10 * time.Second))
		s := l.Snapshot()
		idle := func(prefix string) float64 {
			var j float64
			for _, c := range s.Cgroups {
				if strings.HasPrefix(c.Cgroup, prefix) {
					j += c.Energy.Get("package").IdleJ
				}
			}
			return j
		}
		gotA, gotB, gotD := idle(a), idle(b), idle(dmn)
		if math.Abs(gotA-tc.vmA) > tc.vmA/100 || math.Abs(gotB-tc.vmB) > tc.vmB/100 || gotD != 0 {
			t.Errorf("split %s (vm-b's allocation known: %v): idle vm-a %.1f J, vm-b %.1f J, daemon %.1f J; want %v, %v, 0",
				tc.split, !tc.bare, gotA, gotB, gotD, tc.vmA, tc.vmB)
		}
		if z := zoneOf(s, "package", -1); math.Abs(z.IdleJ-600) > 1e-9 {
			t.Errorf("split %s: node idle %v J, want 600", tc.split, z.IdleJ)
		}
	}
}
