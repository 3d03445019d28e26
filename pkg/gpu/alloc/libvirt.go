package alloc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload/libvirt"
)

// Libvirt finds GPUs held by running libvirt domains: <hostdev type='pci'>
// passes a whole device through (Whole: its energy is the VM's), and
// <hostdev type='mdev'> gives the VM a mediated slice (vGPU) of the parent
// device named by /sys/bus/mdev/devices/<uuid>.
type Libvirt struct {
	// RunDir holds the status files of running domains
	// (/run/libvirt/qemu).
	RunDir    string
	SysfsRoot string
}

func (l *Libvirt) Name() string { return "libvirt" }

// Allocations reads every status file; a file that does not parse is
// skipped and reported in the error, the others still count.
func (l *Libvirt) Allocations(context.Context) ([]Allocation, error) {
	dir := l.RunDir
	if dir == "" {
		dir = libvirt.DefaultDirs[0]
	}
	sys := l.SysfsRoot
	if sys == "" {
		sys = "/sys"
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.xml"))
	if err != nil {
		return nil, err
	}
	var out []Allocation
	var errs []error
	for _, p := range files {
		f, err := os.Open(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d, devs, err := libvirt.ParseDomainDevices(f)
		f.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p, err))
			continue
		}
		h := reading.Holder{Kind: reading.HolderVM, VMName: d.Name, VMUUID: d.UUID}
		for _, addr := range devs.Hostdevs {
			out = append(out, Allocation{Device: Ref{PCI: addr}, Holder: h, Whole: true})
		}
		for _, u := range devs.Mdevs {
			parent, err := filepath.EvalSymlinks(filepath.Join(sys, "bus", "mdev", "devices", u))
			if err != nil {
				errs = append(errs, fmt.Errorf("mdev %s of %s: %w", u, d.Name, err))
				continue
			}
			out = append(out, Allocation{Device: Ref{PCI: filepath.Base(filepath.Dir(parent))}, Holder: h})
		}
	}
	return out, errors.Join(errs...)
}
