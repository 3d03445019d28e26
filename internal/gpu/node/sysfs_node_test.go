package node

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// End to end on a fixture tree: an amdgpu card (DRM card 1, card 0 being
// the BMC's VGA device, driver ast) used by two processes of Slurm job 31
// at 3:1 busy time, configured idle 25 W by PCI address, idle policy
// "holder". Slurm calls the card GPU 0, as the node's first GPU; so does
// the source (no order map needed to skip the BMC's card): the job holds
// the card, carries its idle energy, and every interval conserves.
func TestSysfsSlurmEndToEnd(t *testing.T) {
	root := t.TempDir()
	sys, proc := filepath.Join(root, "sys"), filepath.Join(root, "proc")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		must(os.MkdirAll(filepath.Dir(p), 0o755))
		must(os.WriteFile(p, []byte(s), 0o644))
	}
	dev := filepath.Join(sys, "devices", "pci0000:00", "0000:0a:00.0")
	drv := filepath.Join(sys, "bus", "pci", "drivers", "amdgpu")
	must(os.MkdirAll(drv, 0o755))
	write(filepath.Join(dev, "device"), "0x74a1\n")
	must(os.Symlink(drv, filepath.Join(dev, "driver")))
	power := filepath.Join(dev, "hwmon", "hwmon4", "power1_average")
	write(power, "300000000\n")
	must(os.MkdirAll(filepath.Join(sys, "class", "drm", "card1"), 0o755))
	must(os.Symlink(dev, filepath.Join(sys, "class", "drm", "card1", "device")))
	bmc := filepath.Join(sys, "devices", "pci0000:00", "0000:02:00.0")
	ast := filepath.Join(sys, "bus", "pci", "drivers", "ast")
	must(os.MkdirAll(ast, 0o755))
	must(os.MkdirAll(bmc, 0o755))
	must(os.Symlink(ast, filepath.Join(bmc, "driver")))
	must(os.MkdirAll(filepath.Join(sys, "class", "drm", "card0"), 0o755))
	must(os.Symlink(bmc, filepath.Join(sys, "class", "drm", "card0", "device")))
	fdinfo := map[int]string{}
	for _, pid := range []int{500, 501} {
		p := filepath.Join(proc, fmt.Sprint(pid))
		write(filepath.Join(p, "environ"), "SLURM_JOB_ID=31\x00SLURM_JOB_GPUS=0\x00")
		must(os.MkdirAll(filepath.Join(p, "fd"), 0o755))
		must(os.Symlink("/dev/dri/renderD129", filepath.Join(p, "fd", "5")))
		fdinfo[pid] = filepath.Join(p, "fdinfo", "5")
	}
	cfg := Config{Sysfs: "auto", NVML: "off", SysfsRoot: sys, ProcfsRoot: proc, Slurm: true,
		IdleWatts: map[string]float64{"0000:0a:00.0": 25}}
	g, err := Open(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var p500, p501 float64
	for k := 0; k <= 20; k++ {
		for pid, share := range map[int]uint64{500: 3, 501: 1} {
			write(fdinfo[pid], fmt.Sprintf("drm-driver:\tamdgpu\ndrm-pdev:\t0000:0a:00.0\ndrm-client-id:\t%d\ndrm-engine-gfx:\t%d ns\n",
				pid, share*uint64(k)*200_000_000))
		}
		iv := g.Interval(context.Background(), time.Unix(1000+int64(k), 0))
		if len(iv.Devices) != 1 {
			t.Fatalf("%+v", iv)
		}
		d := iv.Devices[0]
		if k == 0 {
			continue
		}
		r := d.Reading
		if r.Device.Index != 0 || !d.HasHolder || d.Holder.JobID != "31" || d.Whole || !r.OK || math.Abs(r.EnergyJ-300) > 300e-9 {
			t.Fatalf("interval %d: %+v", k, d)
		}
		p500 += r.Usage[500]
		p501 += r.Usage[501]
	}
	if math.Abs(p500/p501-3) > 1e-9 {
		t.Errorf("split %v : %v", p500, p501)
	}
}
