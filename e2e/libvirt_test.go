//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// The domains libvirt.sh defines.
const (
	burnVM = "wattrace-e2e-burn" // a TCG vCPU spinning: ~1 CPU
	idleVM = "wattrace-e2e-idle" // halted in SeaBIOS: ~0.5% of a CPU
)

const unified = "/sys/fs/cgroup/unified"

type vm struct {
	name, uuid string
	cgroup     string // the VM's cgroup2 dir: machine/qemu-N-NAME.libvirt-qemu
	rel        string // cgroup relative to the cgroup2 root, as the exporter names it
	usage0     uint64 // cpu.stat usage_usec at the window's start and end
	usage1     uint64
}

func (v *vm) usage(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(v.cgroup, "cpu.stat"))
	if err != nil {
		t.Fatalf("VM %s: %v", v.name, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "usage_usec" {
			n, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil {
				t.Fatalf("VM %s cpu.stat: %v", v.name, err)
			}
			return n
		}
	}
	t.Fatalf("VM %s: no usage_usec in %s/cpu.stat", v.name, v.cgroup)
	return 0
}

// vmSeries selects the samples of one VM by its uuid.
func vmSeries(v *vm) func(*dto.Metric) bool {
	return func(m *dto.Metric) bool { return label(m, "vm_uuid") == v.uuid }
}

// vmCgroups selects the cgroup series of the VMs' cgroups and their
// children (emulator, vcpu0).
func vmCgroups(vms ...*vm) func(*dto.Metric) bool {
	return func(m *dto.Metric) bool {
		cg := label(m, "cgroup")
		for _, v := range vms {
			if cg == v.rel || strings.HasPrefix(cg, v.rel+"/") {
				return true
			}
		}
		return false
	}
}

// startLibvirtVMs takes the libvirt bed's lock, starts libvirtd and
// libvirt.sh's two domains (burnVM, then idleVM), registers their
// teardown, and returns them with their uuids and cgroup2 directories.
// The bed's settings (BURN_VCPUS, …) are the environment's.
func startLibvirtVMs(t *testing.T) []*vm {
	t.Helper()
	requireRoot(t)
	if _, err := os.Stat(filepath.Join(unified, "cgroup.controllers")); err != nil {
		t.Fatalf("cgroup2 is expected at %s on this machine kind: %v", unified, err)
	}
	libvirtLock(t)
	t.Cleanup(func() {
		if t.Failed() {
			tailFile(t, "/tmp/wattrace-e2e-libvirt/libvirtd.log", 30)
		}
		if _, err := script(t, 3*time.Minute, "libvirt.sh", "teardown"); err != nil {
			t.Errorf("libvirt.sh teardown: %v", err)
		}
		for _, n := range []string{burnVM, idleVM} {
			if left, _ := filepath.Glob("/sys/fs/cgroup/*/machine/qemu-*-" + n + ".libvirt-qemu"); len(left) > 0 {
				t.Errorf("VM cgroups left after teardown: %v", left)
			}
		}
	})
	if _, err := script(t, 15*time.Minute, "libvirt.sh", "setup"); err != nil {
		t.Fatalf("libvirt.sh setup: %v", err)
	}
	env := []string{"LIBVIRT_DEFAULT_URI=qemu:///system"}
	var vms []*vm
	for _, n := range []string{burnVM, idleVM} {
		uuid, err := run(30*time.Second, env, "virsh", "domuuid", n)
		if err != nil {
			t.Fatal(err)
		}
		dirs, _ := filepath.Glob(filepath.Join(unified, "machine", "qemu-*-"+n+".libvirt-qemu"))
		if len(dirs) != 1 {
			t.Fatalf("VM %s: want one cgroup2 dir machine/qemu-*-%s.libvirt-qemu, found %v", n, n, dirs)
		}
		vms = append(vms, &vm{name: n, uuid: uuid, cgroup: dirs[0], rel: strings.TrimPrefix(dirs[0], unified)})
		t.Logf("VM %s uuid %s cgroup %s", n, uuid, dirs[0])
	}
	return vms
}

// TestLibvirtVMs starts libvirtd and two real QEMU (TCG) domains, one
// burning a CPU and one idle, and the exporter keyed by the cgroup2
// hierarchy (where, on this hybrid host, libvirt's per-VM cgroups have
// their CPU usage). Over a window of >= 12 s the exporter's per-VM CPU
// seconds must match the VM cgroups' cpu.stat usage within 2%, name and
// uuid must be libvirt's, and the burner must have more energy than the
// idle VM.
func TestLibvirtVMs(t *testing.T) {
	begin := time.Now()
	vms := startLibvirtVMs(t)
	t.Logf("VMs up after %v", time.Since(begin).Round(time.Millisecond))
	burn, idle := vms[0], vms[1]

	e := startExporter(t, "--accounting.mode=bpf", "--cgroup.hierarchy=v2")

	// Both VMs must show up as VMs within a few intervals.
	var fams families
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		fams = e.mustScrape(t)
		_, nb := sumWhere(fams, "wattrace_vm_cpu_seconds_total", vmSeries(burn))
		_, ni := sumWhere(fams, "wattrace_vm_cpu_seconds_total", vmSeries(idle))
		if nb > 0 && ni > 0 {
			break
		}
		if time.Now().After(deadline) {
			dump(t, fams, vmCgroups(vms...), "wattrace_cgroup_cpu_seconds_total")
			dump(t, fams, nil, "wattrace_vm_cpu_seconds_total", "wattrace_units_running", "wattrace_cgroup_hierarchy_info")
			t.Fatalf("both VMs not in wattrace_vm_cpu_seconds_total within 15 s")
		}
	}

	// The window: from one interval to one >= 12 s later, reading the
	// cgroups' usage the moment each interval shows up in a scrape.
	start := e.nextInterval(t, func() {
		for _, v := range vms {
			v.usage0 = v.usage(t)
		}
	})
	t0 := time.Now()
	time.Sleep(12 * time.Second)
	end := e.nextInterval(t, func() {
		for _, v := range vms {
			v.usage1 = v.usage(t)
		}
	})
	window := time.Since(t0)
	t.Logf("window %v", window.Round(time.Millisecond))
	dump(t, end, vmCgroups(vms...), "wattrace_cgroup_cpu_seconds_total")
	dump(t, end, nil, "wattrace_vm_cpu_seconds_total", "wattrace_vm_energy_joules_total", "wattrace_units_running", "wattrace_accounting_mode")

	if v, _ := sum(end, "wattrace_accounting_mode", map[string]string{"mode": "bpf"}); v != 1 {
		t.Errorf("wattrace_accounting_mode{mode=\"bpf\"} = %v, want 1", v)
	}
	if v, _ := sum(end, "wattrace_units_running", map[string]string{"level": "vm"}); v < 2 {
		t.Errorf("wattrace_units_running{level=\"vm\"} = %v, want >= 2", v)
	}

	dE := map[*vm]float64{}
	for _, v := range vms {
		ref := float64(v.usage1-v.usage0) / 1e6
		// Tolerance 2%, and at least 10 ms for the idle VM's tiny figure.
		tol := func(got float64) bool { return within(got, ref, 0.02) || abs(got-ref) <= 0.01 }

		c0, _ := sumWhere(start, "wattrace_cgroup_cpu_seconds_total", vmCgroups(v))
		c1, n := sumWhere(end, "wattrace_cgroup_cpu_seconds_total", vmCgroups(v))
		t.Logf("VM %s: cgroup series +%.4f s over %d cgroups vs cpu.stat +%.4f s (%+.3f%%)", v.name, c1-c0, n, ref, pct(c1-c0, ref))
		if n == 0 || !tol(c1-c0) {
			t.Errorf("VM %s: wattrace_cgroup_cpu_seconds_total of its cgroups grew %.4f s, cpu.stat usage %.4f s: want within 2%%", v.name, c1-c0, ref)
		}

		ms := match(end, "wattrace_vm_cpu_seconds_total", vmSeries(v))
		if len(ms) != 1 {
			t.Errorf("VM %s: %d series of wattrace_vm_cpu_seconds_total{vm_uuid=%q}, want 1", v.name, len(ms), v.uuid)
			continue
		}
		if got := label(ms[0], "vm"); got != v.name {
			t.Errorf("VM %s: label vm=%q, want %q", v.name, got, v.name)
		}
		t.Logf("VM %s: instance=%q", v.name, label(ms[0], "instance"))
		s0, _ := sumWhere(start, "wattrace_vm_cpu_seconds_total", vmSeries(v))
		d := value(ms[0]) - s0
		t.Logf("VM %s: wattrace_vm_cpu_seconds_total +%.4f s vs cpu.stat +%.4f s (%+.3f%%)", v.name, d, ref, pct(d, ref))
		if !tol(d) {
			t.Errorf("VM %s: wattrace_vm_cpu_seconds_total grew %.4f s, cgroup cpu.stat usage %.4f s: want within 2%%", v.name, d, ref)
		}
		e0, _ := sumWhere(start, "wattrace_vm_energy_joules_total", vmSeries(v))
		e1, ne := sumWhere(end, "wattrace_vm_energy_joules_total", vmSeries(v))
		if ne == 0 {
			t.Errorf("VM %s: no wattrace_vm_energy_joules_total", v.name)
		}
		dE[v] = e1 - e0
		t.Logf("VM %s: energy +%.3f J", v.name, dE[v])
	}
	if burnRef := float64(burn.usage1-burn.usage0) / 1e6; burnRef < 0.5*window.Seconds() {
		t.Errorf("the burner VM used only %.2f s of CPU in %v: not burning", burnRef, window)
	}
	if !(dE[burn] > 0 && dE[burn] > 10*dE[idle]) {
		t.Errorf("energy: burner +%.3f J, idle +%.3f J: want the burner well above the idle VM", dE[burn], dE[idle])
	}
	t.Logf("TestLibvirtVMs body took %v", time.Since(begin).Round(time.Millisecond))
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

func pct(got, want float64) float64 {
	if want == 0 {
		return 0
	}
	return 100 * (got - want) / want
}
