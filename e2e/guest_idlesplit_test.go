//go:build e2e

package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/wattrace/wattrace/internal/testenv"
)

// TestVMIdleSplitOnRealVMs runs docs/vm.md's worked example on real
// domains: two libvirt QEMU (TCG) VMs, one busy (libvirt.sh's burner, 2
// vCPUs, 64 MiB, capped at half a CPU) and one idle (in SeaBIOS, 1 vCPU,
// 128 MiB), and a busy host daemon (a real process in a cgroup of its
// own). The host has no RAPL: a fixture package zone counts 100 W, of
// which --power.idle-watts makes 60 W idle, so the node's idle energy is
// known. Under power.idle-policy=even and each --vm.idle-split, over a
// window of real intervals: the node's idle is 60 W times the intervals'
// length, each VM's idle joules are the node's times its part (even: 1:1;
// vcpus: 2:1; memory: 64:128 MiB) within 1%, whether it was busy or not,
// and the daemon, busy as it is, gets none.
func TestVMIdleSplitOnRealVMs(t *testing.T) {
	begin := time.Now()
	const (
		busyVCPUs, busyMiB = 2, 64
		idleVCPUs, idleMiB = 1, 128
		watts, idleWatts   = 100.0, 60.0
	)
	for k, v := range map[string]string{"BURN_VCPUS": fmt.Sprint(busyVCPUs), "BURN_MEM_MIB": fmt.Sprint(busyMiB),
		"IDLE_VCPUS": fmt.Sprint(idleVCPUs), "IDLE_MEM_MIB": fmt.Sprint(idleMiB), "BURN_QUOTA_US": "50000"} {
		t.Setenv(k, v)
	}
	vms := startLibvirtVMs(t)
	t.Logf("VMs up after %v", time.Since(begin).Round(time.Millisecond))
	busy, idle := vms[0], vms[1]

	// The host daemon: about half a CPU, in its own cgroup.
	daemon := testenv.Cgroup(t, unified, "daemon")
	d := testenv.StartIn(t, daemon, "/bin/sh", "-c", "while :; do timeout 0.05 sh -c 'while :; do :; done'; sleep 0.05; done")
	testenv.WaitIn(t, daemon, d.Process.Pid)

	sysfs := raplFixture(t, filepath.Join(t.TempDir(), "sys"), watts)
	for _, tc := range []idleSplitCase{
		{"even", 1, 1},
		{"vcpus", busyVCPUs, idleVCPUs},
		{"memory", busyMiB, idleMiB},
	} {
		t.Run(tc.split, func(t *testing.T) {
			start := time.Now()
			e := startExporter(t, "--accounting.mode=bpf", "--cgroup.hierarchy=v2", "--path.sysfs="+sysfs, "--power.source=rapl",
				"--power.idle-policy=even", fmt.Sprintf("--power.idle-watts=package=%g", idleWatts), "--vm.idle-split="+tc.split)
			defer e.stop()
			checkIdleSplit(t, e, tc, busy, idle, strings.TrimPrefix(daemon, unified), idleWatts)
			t.Logf("split %s took %v", tc.split, time.Since(start).Round(time.Millisecond))
		})
	}
	t.Logf("TestVMIdleSplitOnRealVMs took %v", time.Since(begin).Round(time.Millisecond))
}

// idleSplitCase is one --vm.idle-split and the VMs' parts of the node's
// idle under it, by docs/vm.md.
type idleSplitCase struct {
	split      string
	busy, idle float64
}

// vmIdleJ selects a VM's package idle energy.
func vmIdleJ(v *vm) func(*dto.Metric) bool {
	return func(m *dto.Metric) bool {
		return vmSeries(v)(m) && label(m, "zone") == "package" && label(m, "mode") == "idle"
	}
}

// checkIdleSplit waits until both VMs carry idle energy, then over a
// window of real intervals checks the node's idle against the configured
// watts, each VM's idle against its part, and the daemon's (cgroup
// daemon) against none.
func checkIdleSplit(t *testing.T, e *exporter, tc idleSplitCase, busy, idle *vm, daemon string, idleWatts float64) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		fams := e.mustScrape(t)
		b, _ := sumWhere(fams, "wattrace_vm_energy_joules_total", vmIdleJ(busy))
		i, _ := sumWhere(fams, "wattrace_vm_energy_joules_total", vmIdleJ(idle))
		if b > 0 && i > 0 {
			break
		}
		if time.Now().After(deadline) {
			dump(t, fams, nil, "wattrace_vm_energy_joules_total", "wattrace_units_running")
			t.Fatalf("both VMs did not get idle energy within 15 s")
		}
	}
	f0 := e.nextInterval(t, func() {})
	time.Sleep(8 * time.Second)
	f1 := e.nextInterval(t, func() {})
	delta := func(name string, keep func(*dto.Metric) bool) float64 {
		a, _ := sumWhere(f0, name, keep)
		b, _ := sumWhere(f1, name, keep)
		return b - a
	}
	cpu := func(keep func(*dto.Metric) bool) float64 { return delta("wattrace_cgroup_cpu_seconds_total", keep) }
	dt := delta("wattrace_stats_last_update_timestamp_seconds", nil)
	nodeIdle := delta("wattrace_node_energy_joules_total", labelsEq(map[string]string{"zone": "package", "mode": "idle"}))
	daemonCg := func(m *dto.Metric) bool { return label(m, "cgroup") == daemon }
	daemonIdle := func(m *dto.Metric) bool {
		return daemonCg(m) && label(m, "zone") == "package" && label(m, "mode") == "idle"
	}
	t.Logf("split %s over %.3f s of intervals: node %.3f J, idle %.3f J (%g W configured: %.3f J); daemon CPU %.3f s, idle %.6f J; VM CPU: %s %.3f s, %s %.3f s",
		tc.split, dt, delta("wattrace_node_energy_joules_total", labelsEq(map[string]string{"zone": "package"})), nodeIdle,
		idleWatts, idleWatts*dt, cpu(daemonCg), delta("wattrace_cgroup_energy_joules_total", daemonIdle),
		busy.name, cpu(vmCgroups(busy)), idle.name, cpu(vmCgroups(idle)))
	if n, _ := sum(f1, "wattrace_units_running", map[string]string{"level": "vm"}); n != 2 {
		t.Errorf("wattrace_units_running{level=\"vm\"} = %v: want the bed's 2 VMs only (another VM would take a part)", n)
	}
	if dt < 5 || !within(nodeIdle, idleWatts*dt, 0.01) {
		t.Errorf("the node's idle grew %.3f J over %.3f s: want %g W of it (%.3f J) within 1%%", nodeIdle, dt, idleWatts, idleWatts*dt)
	}
	for v, part := range map[*vm]float64{busy: tc.busy, idle: tc.idle} {
		got, want := delta("wattrace_vm_energy_joules_total", vmIdleJ(v)), nodeIdle*part/(tc.busy+tc.idle)
		t.Logf("VM %s: idle %.4f J, want %.4f J (%+.3f%%)", v.name, got, want, pct(got, want))
		if !within(got, want, 0.01) {
			t.Errorf("split %s: VM %s's idle %.4f J, want %.4f J (docs/vm.md: its part of the node's %.4f J) within 1%%", tc.split, v.name, got, want, nodeIdle)
		}
	}
	if _, n := sumWhere(f1, "wattrace_cgroup_energy_joules_total", daemonIdle); n == 0 || delta("wattrace_cgroup_energy_joules_total", daemonIdle) != 0 {
		t.Errorf("the host daemon's idle grew %.6f J (%d series): want a series that stays at 0 J", delta("wattrace_cgroup_energy_joules_total", daemonIdle), n)
	}
	if c := cpu(daemonCg); c < 0.1*dt {
		t.Errorf("the host daemon used %.3f s of CPU in %.3f s: not busy", c, dt)
	}
	if cb, ci := cpu(vmCgroups(busy)), cpu(vmCgroups(idle)); cb < 0.2*dt || cb < 10*ci {
		t.Errorf("VM CPU: %s %.3f s, %s %.3f s in %.3f s: want the busy one busy and the idle one idle", busy.name, cb, idle.name, ci, dt)
	}
}
