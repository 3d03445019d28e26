package stats

import (
	"sort"
	"strings"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// The values of Config.VMIdleSplit.
const (
	vmSplitEven   = "even"
	vmSplitVCPUs  = "vcpus"
	vmSplitMemory = "memory"
)

// vmIdle splits a host's idle energy among its VMs under the even idle
// policy. The machine is on for its tenants: each VM that exists pays its
// part of the idle whether it was busy this interval or not, one part per
// VM rather than one per busy cgroup (a VM's emulator and each vCPU are
// cgroups of their own), and the host's own daemons pay none, so they do
// not dilute what the tenants' bills hold.
type vmIdle struct {
	by   string
	ids  WorkloadResolver
	cgs  consumers
	log  *zap.Logger
	warn bool // the fallback to an even split was logged
	// Scratch reused every interval.
	byVM map[string]*vmAcc
	out  []vmShare
}

// vmShare is one VM's part of the idle, given to one of its cgroups (the
// VM's own, its top one) so that it rolls up into the VM.
type vmShare struct {
	to     *consumer
	weight float64
}

type vmAcc struct {
	to                    *consumer
	vcpus                 int
	memKiB                uint64
	haveVCPUs, haveMemory bool
}

func newVMIdle(by string, ids WorkloadResolver, cgs consumers, log *zap.Logger) *vmIdle {
	if by == "" {
		by = vmSplitEven
	}
	return &vmIdle{by: by, ids: ids, cgs: cgs, log: log, byVM: map[string]*vmAcc{}}
}

// shares are the VMs' parts of this interval's idle, summing to 1; none
// when the host has no VM (the policy then splits it as ever).
func (v *vmIdle) shares() []vmShare {
	clear(v.byVM)
	for c := range v.cgs.cgroups() {
		if c.gone || !c.w.Alive {
			continue
		}
		id := v.ids.Resolve(c.w.Cgroup)
		if id.Kind != ident.KindVM || id.ID == "" {
			continue
		}
		a := v.byVM[id.ID]
		if a == nil {
			a = &vmAcc{}
			v.byVM[id.ID] = a
		}
		// The VM's top cgroup (the shortest path) carries its part.
		if a.to == nil || len(c.w.Cgroup) < len(a.to.w.Cgroup) ||
			(len(c.w.Cgroup) == len(a.to.w.Cgroup) && c.w.Cgroup < a.to.w.Cgroup) {
			a.to = c
		}
		if id.VMVCPUs > 0 {
			a.vcpus, a.haveVCPUs = id.VMVCPUs, true
		}
		if id.VMMemoryKiB > 0 {
			a.memKiB, a.haveMemory = id.VMMemoryKiB, true
		}
	}
	v.out = v.out[:0]
	if len(v.byVM) == 0 {
		return nil
	}
	keys := make([]string, 0, len(v.byVM))
	for k := range v.byVM {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	weight := func(a *vmAcc) float64 { return 1 }
	var unknown []string
	switch v.by {
	case vmSplitVCPUs:
		weight = func(a *vmAcc) float64 { return float64(a.vcpus) }
		for _, k := range keys {
			if !v.byVM[k].haveVCPUs {
				unknown = append(unknown, k)
			}
		}
	case vmSplitMemory:
		weight = func(a *vmAcc) float64 { return float64(a.memKiB) }
		for _, k := range keys {
			if !v.byVM[k].haveMemory {
				unknown = append(unknown, k)
			}
		}
	}
	if len(unknown) > 0 {
		// A VM whose allocation libvirt's XML does not give cannot be
		// weighed against the others: this interval splits evenly.
		if !v.warn {
			v.warn = true
			v.log.Warn("vm.idle-split: allocation not known for some VMs; splitting their host's idle evenly among VMs",
				zap.String("by", v.by), zap.String("vms", strings.Join(unknown, ",")))
		}
		weight = func(a *vmAcc) float64 { return 1 }
	}
	var total float64
	for _, k := range keys {
		total += weight(v.byVM[k])
	}
	for _, k := range keys {
		a := v.byVM[k]
		v.out = append(v.out, vmShare{to: a.to, weight: weight(a) / total})
	}
	return v.out
}
