// Package alloc finds who holds each GPU, busy or idle: Slurm jobs (from
// their processes' environment), Kubernetes pods (from the kubelet's
// pod-resources API) and libvirt VMs (from their domain XML's PCI hostdev
// and mdev entries). A GPU passed through to a VM is owned Whole by it: the
// host sees no processes on it, so all its energy (where it can still be
// read) belongs to the VM.
package alloc

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/wattrace/wattrace/pkg/gpu"
	"github.com/wattrace/wattrace/pkg/reading"
)

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
	Holder reading.Holder
	// Whole: the holder owns the device outright (PCI passthrough).
	Whole bool
}

// Source lists current allocations.
type Source interface {
	Name() string
	Allocations(ctx context.Context) ([]Allocation, error)
}

// Key names what an allocation resolved to: a device (its reading.GPUDevice.Key)
// or one MIG instance of it (Instance "<index>.<gi>").
type Key struct {
	Device   string
	Instance string
}

// Resolve matches allocations to devices, keeping one holder per device:
// the first of ResolveAll's.
func Resolve(devs []reading.GPUDevice, allocs []Allocation, migUUID map[string]string) map[Key]Allocation {
	all := ResolveAll(devs, allocs, migUUID)
	out := make(map[Key]Allocation, len(all))
	for k, as := range all {
		out[k] = as[0]
	}
	return out
}

// rank orders holder kinds by precedence: a passed-through device is the
// VM's whatever else claims it, then pods, then Slurm jobs.
func rank(k reading.HolderKind) int {
	switch k {
	case reading.HolderVM:
		return 0
	case reading.HolderPod:
		return 1
	case reading.HolderSlurmJob:
		return 2
	}
	return 3
}

// ResolveAll matches allocations to devices. Allocations that match no
// device are dropped (a device of another source, a stale job). A device
// (or MIG instance) claimed by holders of several kinds keeps those of
// the kind with precedence (VMs, then pods, then Slurm jobs); a device
// shared by several holders of that kind (time-slicing replicas, MPS,
// Slurm shards, vGPU mdevs) keeps them all, each once, sorted by their
// labels, so a split among them never depends on glob or kubelet order.
// migUUID maps MIG-… UUIDs (as the NVIDIA device plugin names MIG
// devices) to instance names "<index>.<gi>"; it may be nil.
func ResolveAll(devs []reading.GPUDevice, allocs []Allocation, migUUID map[string]string) map[Key][]Allocation {
	out := make(map[Key][]Allocation, len(allocs))
	for _, a := range allocs {
		if name, ok := migUUID[a.Device.UUID]; ok && a.Device.UUID != "" {
			a.Device = Ref{Index: name}
		}
		for _, d := range devs {
			k, ok := match(d, a.Device)
			if !ok {
				continue
			}
			have := out[k]
			switch {
			case len(have) == 0 || rank(a.Holder.Kind) < rank(have[0].Holder.Kind):
				out[k] = append(have[:0], a)
			case rank(a.Holder.Kind) == rank(have[0].Holder.Kind):
				dup := false
				for i := range have {
					if have[i].Holder == a.Holder {
						have[i].Whole = have[i].Whole || a.Whole
						dup = true
					}
				}
				if !dup {
					out[k] = append(have, a)
				}
			}
			break
		}
	}
	for _, as := range out {
		slices.SortFunc(as, func(a, b Allocation) int { return cmpHolder(a.Holder, b.Holder) })
	}
	return out
}

func cmpHolder(a, b reading.Holder) int {
	for _, p := range [][2]string{{a.JobID, b.JobID}, {a.Namespace, b.Namespace}, {a.Pod, b.Pod},
		{a.Container, b.Container}, {a.VMUUID, b.VMUUID}, {a.VMName, b.VMName}} {
		if c := strings.Compare(p[0], p[1]); c != 0 {
			return c
		}
	}
	return 0
}

func match(d reading.GPUDevice, r Ref) (Key, bool) {
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
