//go:build e2e && cgo

package e2e

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/wattrace/wattrace/internal/gpu/node"
	"github.com/wattrace/wattrace/pkg/gpu"
	"github.com/wattrace/wattrace/pkg/gpu/alloc"
	"github.com/wattrace/wattrace/pkg/gpu/nvml"
	"github.com/wattrace/wattrace/pkg/reading"
)

// A real Slurm job (slurm.sh's single-node cluster, whose node has two
// fake GPUs as a GRES) asks --gres=gpu:1 for the second GPU's worth: Slurm
// puts SLURM_JOB_GPUS in its environment, and the GPU allocation source,
// reading the real /proc, maps the job to the mock NVML GPU of that index
// through gpu.slurm-gpu-order-map (Slurm 0 → device 1, 1 → device 0); the
// other mock GPU has no holder.
func TestSlurmJobGPUs(t *testing.T) {
	requireRoot(t)
	slurmLock(t)
	t.Setenv("SLURM_E2E_GPUS", "1")
	t.Cleanup(func() {
		if t.Failed() {
			tailFile(t, "/var/log/slurm/slurmctld.log", 30)
			tailFile(t, "/var/log/slurm/slurmd.log", 30)
		}
		if _, err := script(t, 3*time.Minute, "slurm.sh", "clean"); err != nil {
			t.Errorf("slurm.sh clean: %v", err)
		}
	})
	if _, err := script(t, 12*time.Minute, "slurm.sh", "reset"); err != nil {
		t.Fatalf("slurm.sh reset: %v", err)
	}
	out, err := exec.Command("sbatch", "--parsable", "--gres=gpu:1", "-o", "/dev/null", "--wrap", "exec sleep 120").CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch: %v\n%s", err, out)
	}
	jobID := strings.TrimSpace(strings.Split(string(out), ";")[0])
	t.Cleanup(func() { _ = exec.Command("scancel", jobID).Run() })

	srv := dgxa100.NewWithGPUs(gpus.Multiple(2, gpus.A100_SXM4_40GB)...)
	for _, d := range srv.Devices {
		d := d.(*server.Device)
		d.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
		d.GpmQueryDeviceSupportFunc = func() (gonvml.GpmSupport, gonvml.Return) { return gonvml.GpmSupport{}, gonvml.ERROR_NOT_SUPPORTED }
		d.GetTotalEnergyConsumptionFunc = func() (uint64, gonvml.Return) { return 1000, gonvml.SUCCESS }
		d.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) { return gonvml.Utilization{}, gonvml.SUCCESS }
		d.GetProcessUtilizationFunc = func(uint64) ([]gonvml.ProcessUtilizationSample, gonvml.Return) {
			return nil, gonvml.ERROR_NOT_FOUND
		}
		d.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) { return nil, gonvml.SUCCESS }
	}
	src, err := nvml.New(srv, nvml.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	om, err := alloc.ParseOrderMap("0:1,1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := node.New(node.Config{Slurm: true}, []gpu.Source{src}, []alloc.Source{&alloc.Slurm{ProcRoot: "/proc", Order: om}}, nil)
	var iv *reading.GPUInterval
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		iv = g.Interval(context.Background(), time.Now())
		if len(iv.Devices) == 2 && iv.Devices[1].HasHolder {
			break
		}
	}
	env := jobEnv(t, jobID)
	t.Logf("job %s: SLURM_JOB_GPUS=%q", jobID, env["SLURM_JOB_GPUS"])
	if env["SLURM_JOB_GPUS"] != "0" {
		t.Fatalf("job %s has SLURM_JOB_GPUS=%q, want 0 (the first of the node's two GRES GPUs)", jobID, env["SLURM_JOB_GPUS"])
	}
	d0, d1 := iv.Devices[0], iv.Devices[1]
	if !d1.HasHolder || d1.Holder.Kind != reading.HolderSlurmJob || d1.Holder.JobID != jobID || d1.Whole || d0.HasHolder {
		t.Fatalf("device 0 %+v, device 1 %+v; want device 1 held by job %s", d0, d1, jobID)
	}
}

// jobEnv returns the environment of one of the job's processes.
func jobEnv(t *testing.T, jobID string) map[string]string {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		env := map[string]string{}
		for _, kv := range strings.Split(string(b), "\x00") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = v
			}
		}
		if env["SLURM_JOB_ID"] == jobID {
			return env
		}
	}
	t.Fatalf("no process of job %s", jobID)
	return nil
}
