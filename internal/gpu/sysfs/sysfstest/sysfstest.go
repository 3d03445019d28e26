// Package sysfstest builds sysfs and procfs fixture trees of DRM cards and
// their clients, shared by the sysfs GPU source's tests and the stats
// loop's GPU tests.
package sysfstest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Tree is a sysfs and procfs fixture with DRM cards and the fdinfo of
// their clients' processes.
type Tree struct {
	t         testing.TB
	Sys, Proc string
	Devices   string
	nextFD    map[int]int
	FDInfo    map[string]string // pid/client → fdinfo file
}

// NewTree makes an empty tree under a temporary directory.
func NewTree(t testing.TB) *Tree {
	root := t.TempDir()
	tr := &Tree{t: t, Sys: filepath.Join(root, "sys"), Proc: filepath.Join(root, "proc"),
		nextFD: map[int]int{}, FDInfo: map[string]string{}}
	tr.Devices = filepath.Join(tr.Sys, "devices", "pci0000:00")
	tr.Mkdir(filepath.Join(tr.Sys, "class", "drm", "card0-DP-1"))
	tr.Mkdir(filepath.Join(tr.Sys, "bus", "pci", "drivers"))
	return tr
}

// Mkdir makes a directory and its parents.
func (tr *Tree) Mkdir(p string) {
	if err := os.MkdirAll(p, 0o755); err != nil {
		tr.t.Fatal(err)
	}
}

// Write writes a file, making its directory.
func (tr *Tree) Write(p, s string) {
	tr.Mkdir(filepath.Dir(p))
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		tr.t.Fatal(err)
	}
}

// Link makes a symbolic link, making its directory.
func (tr *Tree) Link(target, p string) {
	tr.Mkdir(filepath.Dir(p))
	if err := os.Symlink(target, p); err != nil {
		tr.t.Fatal(err)
	}
}

// Card adds DRM card n at PCI address addr bound to driver with hwmon
// files; it returns the hwmon directory.
func (tr *Tree) Card(n int, addr, driver string, hwmon map[string]string) string {
	dev := filepath.Join(tr.Devices, addr)
	tr.Write(filepath.Join(dev, "device"), "0x744c\n")
	tr.Mkdir(filepath.Join(tr.Sys, "bus", "pci", "drivers", driver))
	tr.Link(filepath.Join(tr.Sys, "bus", "pci", "drivers", driver), filepath.Join(dev, "driver"))
	hw := filepath.Join(dev, "hwmon", fmt.Sprintf("hwmon%d", n+2))
	for f, v := range hwmon {
		tr.Write(filepath.Join(hw, f), v)
	}
	tr.Link(dev, filepath.Join(tr.Sys, "class", "drm", fmt.Sprintf("card%d", n), "device"))
	return hw
}

// Client opens DRM client id on pdev in pid (a new fd) and returns the
// fdinfo file to update.
func (tr *Tree) Client(pid int, pdev, driver string, id int) string {
	fd := tr.nextFD[pid] + 3
	tr.nextFD[pid] = fd - 2
	tr.Link("/dev/dri/renderD128", filepath.Join(tr.Proc, fmt.Sprint(pid), "fd", fmt.Sprint(fd)))
	p := filepath.Join(tr.Proc, fmt.Sprint(pid), "fdinfo", fmt.Sprint(fd))
	tr.Write(p, "")
	tr.FDInfo[fmt.Sprint(pid, "/", id)] = p
	return p
}

// Busy is a DRM client's fdinfo with one engine's busy time.
func Busy(driver, pdev string, id int, class string, ns uint64) string {
	return fmt.Sprintf("pos:\t0\nflags:\t02100002\nmnt_id:\t25\ndrm-driver:\t%s\ndrm-pdev:\t%s\ndrm-client-id:\t%d\n"+
		"drm-engine-%s:\t%d ns\ndrm-engine-capacity-%s:\t1\ndrm-memory-vram:\t1024 KiB\n", driver, pdev, id, class, ns, class)
}

// KFDNode adds node n of the KFD topology for the GPU at PCI address
// addr ("0000:c1:00.0") with gpu_id id; cpuCores > 0 makes it an APU's
// node (CPU and GPU in one).
func (tr *Tree) KFDNode(n int, addr string, id uint64, cpuCores, simds int) {
	var dom, bus, dev, fn uint64
	if _, err := fmt.Sscanf(addr, "%x:%x:%x.%x", &dom, &bus, &dev, &fn); err != nil {
		tr.t.Fatal(err)
	}
	dir := filepath.Join(tr.Sys, "class", "kfd", "kfd", "topology", "nodes", fmt.Sprint(n))
	tr.Write(filepath.Join(dir, "gpu_id"), fmt.Sprintf("%d\n", id))
	tr.Write(filepath.Join(dir, "properties"), fmt.Sprintf("cpu_cores_count %d\nsimd_count %d\nsimd_per_cu 4\nlocation_id %d\ndomain %d\n",
		cpuCores, simds, bus<<8|dev<<3|fn, dom))
}

// KFDProc sets process pid's KFD entries for the GPU with gpu_id id: its
// VRAM and, when cu >= 0, its stats_<id>/cu_occupancy (absent otherwise,
// as on kernels without it).
func (tr *Tree) KFDProc(pid int, id uint64, cu int) {
	dir := filepath.Join(tr.Sys, "class", "kfd", "kfd", "proc", fmt.Sprint(pid))
	tr.Write(filepath.Join(dir, fmt.Sprintf("vram_%d", id)), "1048576\n")
	if cu >= 0 {
		tr.Write(filepath.Join(dir, fmt.Sprintf("stats_%d", id), "cu_occupancy"), fmt.Sprintf("%d\n", cu))
	}
}

// PCI puts the device at addr on the PCI bus (bus/pci/devices) with its
// class ("0x030000": a VGA controller) and vendor ("0x1002": AMD), as
// the kernel lists a device whether or not a driver serves it.
func (tr *Tree) PCI(addr, class, vendor string) {
	dev := filepath.Join(tr.Devices, addr)
	tr.Write(filepath.Join(dev, "class"), class+"\n")
	tr.Write(filepath.Join(dev, "vendor"), vendor+"\n")
	tr.Link(dev, filepath.Join(tr.Sys, "bus", "pci", "devices", addr))
}
