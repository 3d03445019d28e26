// Package alloc finds who holds each GPU, busy or idle: Slurm jobs (from
// their processes' environment), Kubernetes pods (from the kubelet's
// pod-resources API) and libvirt VMs (from their domain XML's PCI hostdev
// and mdev entries). A GPU passed through to a VM is owned Whole by it: the
// host sees no processes on it, so all its energy (where it can still be
// read) belongs to the VM.
package alloc

import (
	"context"
	"strconv"
	"strings"

	"github.com/wattrace/wattrace/pkg/gpu"
)

// Kind is the holder's kind, the `kind` label of the allocation series.
type Kind string

const (
	SlurmJob Kind = "slurm"
	Pod      Kind = "pod"
	VM       Kind = "vm"
)

// Holder is who holds a device.
type Holder struct {
	Kind Kind
	// JobID for Slurm.
	JobID string
	// Namespace, Pod and Container for Kubernetes.
	Namespace, Pod, Container string
	// VMName and VMUUID for libvirt.
	VMName, VMUUID string
}

// Ref is how an allocation names a device: whichever of these the holder's
// system gives (a Slurm index through the order map, a device-plugin id,
// a PCI address).
type Ref struct {
	// Index is the vendor index, or "<index>.<gi>" for a MIG instance.
	Index string
	// UUID is an NVIDIA GPU-… or MIG-… UUID.
	UUID string
	// PCI is a PCI address ("0000:3b:00.0").
	PCI string
}

// Allocation is one device held by one holder.
type Allocation struct {
	Device Ref
	Holder Holder
	// Whole: the holder owns the device outright (PCI passthrough).
	Whole bool
}

// Source lists current allocations.
type Source interface {
	Name() string
	Allocations(ctx context.Context) ([]Allocation, error)
}

// Key names what an allocation resolved to: a device (its gpu.Device.Key)
// or one MIG instance of it (Instance "<index>.<gi>").
type Key struct {
	Device   string
	Instance string
}

// Resolve matches allocations to devices. Allocations that match no device
// are dropped (a device of another source, a stale job). When two holders
// claim the same device the first in allocs wins, so the caller orders the
// sources by precedence (libvirt, then Kubernetes, then Slurm). migUUID
// maps MIG-… UUIDs (as the NVIDIA device plugin names MIG devices) to
// instance names "<index>.<gi>"; it may be nil.
func Resolve(devs []gpu.Device, allocs []Allocation, migUUID map[string]string) map[Key]Allocation {
	out := make(map[Key]Allocation, len(allocs))
	for _, a := range allocs {
		if name, ok := migUUID[a.Device.UUID]; ok && a.Device.UUID != "" {
			a.Device = Ref{Index: name}
		}
		for _, d := range devs {
			k, ok := match(d, a.Device)
			if !ok {
				continue
			}
			if _, taken := out[k]; !taken {
				out[k] = a
			}
			break
		}
	}
	return out
}

func match(d gpu.Device, r Ref) (Key, bool) {
	key := Key{Device: d.Key()}
	switch {
	case r.UUID != "":
		if strings.EqualFold(r.UUID, d.UUID) {
			return key, true
		}
		return key, false
	case r.PCI != "":
		return key, d.PCIBusID != "" && gpu.NormPCI(r.PCI) == d.PCIBusID
	case r.Index != "":
		idx, gi, mig := strings.Cut(r.Index, ".")
		if idx != strconv.Itoa(d.Index) {
			return key, false
		}
		if mig {
			key.Instance = idx + "." + gi
		}
		return key, true
	}
	return key, false
}
