package collector

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/wattrace/wattrace/internal/stats"
	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

var update = flag.Bool("update", false, "rewrite golden files")

// layouts are cgroup paths of every workload layout wattrace names, as they
// appear on v1, v2 and hybrid hosts; one fixture tree holds them all.
var layouts = []string{
	// docker: systemd and cgroupfs drivers
	"system.slice/docker-" + strings.Repeat("d1", 32) + ".scope",
	"docker/" + strings.Repeat("d2", 32),
	// containerd (CRI), CRI-O and its monitor, podman (rootless too)
	"system.slice/cri-containerd-" + strings.Repeat("c1", 32) + ".scope",
	"system.slice/crio-" + strings.Repeat("c2", 32) + ".scope",
	"machine.slice/libpod-" + strings.Repeat("e1", 32) + ".scope",
	"user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + strings.Repeat("e2", 32) + ".scope",
	// Kubernetes: systemd driver (burstable, besteffort, guaranteed) and cgroupfs driver
	"kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b4c2c6e_1f2a_4b3c_9d8e_7f6a5b4c3d2e.slice/cri-containerd-" + strings.Repeat("f1", 32) + ".scope",
	"kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1c5d3d7f_2a3b_4c4d_8e9f_8a7b6c5d4e3f.slice/crio-" + strings.Repeat("f2", 32) + ".scope",
	"kubepods.slice/kubepods-pod2d6e4e80_3b4c_4d5e_9fa0_9b8c7d6e5f40.slice/cri-containerd-" + strings.Repeat("f3", 32) + ".scope",
	"kubepods/burstable/pod3e7f5f91-4c5d-4e6f-a0b1-ac9d8e7f6051/" + strings.Repeat("f4", 32),
	// Slurm: v1 with two slurmd on the host, and v2
	"slurm_n1/uid_1000/job_101/step_0/task_0",
	"slurm_n1/uid_1000/job_101/step_batch",
	"slurm_n2/uid_0/job_202/step_extern",
	"system.slice/n3_slurmstepd.scope/job_303/step_0/user/task_0",
	// libvirt/QEMU: with systemd (machined) and without
	`machine.slice/machine-qemu\x2d1\x2dweb01.scope/libvirt/vcpu0`,
	`machine.slice/machine-qemu\x2d1\x2dweb01.scope/libvirt/emulator`,
	"machine/qemu-2-db01.libvirt-qemu/vcpu0",
	// systemd units
	"system.slice/nginx.service",
	"user.slice/user-1000.slice/session-3.scope",
	// anything else
	"batch/adhoc",
}

// treeSource reports CPU for each cgroup of the fixture tree by its id.
type treeSource struct {
	ids []uint64
	ns  []uint64
}

func (s *treeSource) Read() (reading.Usage, error) {
	var r reading.Usage
	for i, id := range s.ids {
		r.Cgroups = append(r.Cgroups, reading.CgroupUsage{ID: id, CPUNs: s.ns[i], Switches: s.ns[i] / 1e6})
	}
	return r, nil
}
func (s *treeSource) Mode() string { return "bpf" }
func (s *treeSource) Close() error { return nil }

type stepMeter struct{ j float64 }

func (m *stepMeter) Name() string    { return "rapl" }
func (m *stepMeter) Estimated() bool { return false }
func (m *stepMeter) Read(_ context.Context) ([]reading.ZoneSample, error) {
	return []reading.ZoneSample{{Zone: "package", Socket: 0, Joules: m.j}}, nil
}

// The whole pipeline over a fixture tree with every layout: cgroup ids
// resolved to paths, paths to workloads (passwd and libvirt XML from
// fixtures), energy split and rolled up; the /metrics text of the
// workload levels is compared with testdata/workloads.golden.
func TestWorkloadLevelsGolden(t *testing.T) {
	mount := t.TempDir()
	src := &treeSource{}
	for i, rel := range layouts {
		dir := filepath.Join(mount, rel)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		src.ids = append(src.ids, inodeOf(t, st))
		src.ns = append(src.ns, uint64(i)*0)
	}
	res := cgroup.NewResolver(cgroup.Hierarchy{Kind: cgroup.V2, Mount: mount})
	host := "../../pkg/workload/testdata/hosts/systemd"
	ids := workload.NewResolver(workload.Options{
		EtcRoot: filepath.Join(host, "etc"), ProcRoot: t.TempDir(), CgroupRoot: mount,
		LibvirtDirs: []string{filepath.Join(host, "run/libvirt/qemu"), "../../pkg/workload/testdata/hosts/cgroupfs/run/libvirt/qemu"},
	})
	m := &stepMeter{}
	loop, err := stats.New(stats.Config{Interval: time.Second, Retention: time.Minute, IdlePolicy: "none",
		IdleWatts: map[string]float64{"package": 10}}, src, m, res, nil, stats.WithWorkloads(ids, ident.Levels()))
	if err != nil {
		t.Fatal(err)
	}
	loop.Step(time.Unix(0, 0))
	for i := range src.ns {
		src.ns[i] = uint64(i+1) * 1e8 // cgroup i used (i+1)/10 s
	}
	m.j = 10 + 21 // 10 J idle, 21 J dynamic over Σ 21 s … split by CPU
	loop.Step(time.Unix(1, 0))

	e, err := New(loop, Options{Levels: ident.Levels()})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e)
	var names []string
	for _, l := range ident.Levels() {
		names = append(names, "wattrace_"+string(l)+"_cpu_seconds_total", "wattrace_"+string(l)+"_energy_joules_total")
	}
	names = append(names, "wattrace_units_running")
	golden := filepath.Join("testdata", "workloads.golden")
	if *update {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		for _, mf := range mfs {
			for _, n := range names {
				if mf.GetName() == n {
					writeFamily(t, &buf, mf)
				}
			}
		}
		if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, bytes.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

func inodeOf(t *testing.T, fi os.FileInfo) uint64 {
	t.Helper()
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		t.Fatal("no inode")
	}
	return st.Ino
}

func writeFamily(t *testing.T, buf *bytes.Buffer, mf *dto.MetricFamily) {
	t.Helper()
	if _, err := expfmt.MetricFamilyToText(buf, mf); err != nil {
		t.Fatal(err)
	}
}
