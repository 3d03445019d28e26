// Package compose opens the node's sources, the per-task CPU accounting
// (accounting.go), the GPU sources and the meters, in the one order and
// with the one set of exclusions that both the exporter and `wattrace
// measure` use: the meters leave out the GPU
// zones of the devices the GPU sources read per device (hwmon's amdgpu,
// i915 and xe chips; pm_counters' accelN zones) and every APU's socket
// sensor. A rule about which meter counts what is written here (or in the
// meter table it feeds, pkg/power/discover), once, and both programs obey
// it.
package compose

import (
	"context"
	"fmt"
	"io"
	"maps"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/gpu/node"
	"github.com/wattrace/wattrace/pkg/gpu"
	"github.com/wattrace/wattrace/pkg/gpu/sysfs"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/power/discover"
	"github.com/wattrace/wattrace/pkg/reading"
)

// Config is what the composition opens: the meters' settings and the GPU
// sources' settings, with the paths the node is read under.
type Config struct {
	// Power is the meter table's configuration; its GPUDevices and APUs
	// are set by Open, whatever they hold.
	Power discover.Config
	// GPU is the GPU sources' configuration; GPUOff leaves them closed
	// (every GPU zone is then the meters').
	GPU    node.Config
	GPUOff bool
	// OpenGPUs opens the GPU sources (node.Open when nil); tests hand in
	// fakes of hardware the machine lacks.
	OpenGPUs func(node.Config, *zap.Logger) (*node.GPUs, error)
}

// Node is the node's energy sources, opened.
type Node struct {
	// GPUs reads the devices per device; nil on a node without GPU (or
	// with the GPU sources off).
	GPUs *node.GPUs
	// GPUDevices are the PCI addresses of the devices GPUs reads, in the
	// order of their zones (gpu socket 0, 1, …); the meters' own GPU
	// zones are numbered after them.
	GPUDevices []string
	// GPUAccels are their accelerator numbers (the vendor's index), for
	// pm_counters' accelN.
	GPUAccels []int
	// Meter is the node's meter, without the GPU zones GPUs reads.
	Meter power.Meter
	zones map[string]int
	// reserved are the sockets of the meters' own GPU zones.
	reserved map[int]bool
}

// Open opens the GPU sources first, then the meters with the GPU devices
// and APUs left out.
func Open(ctx context.Context, cfg Config, log *zap.Logger) (*Node, error) {
	if log == nil {
		log = zap.NewNop()
	}
	n := &Node{zones: map[string]int{}, reserved: map[int]bool{}}
	if !cfg.GPUOff {
		open := cfg.OpenGPUs
		if open == nil {
			open = node.Open
		}
		g, err := open(cfg.GPU, log.Named("gpu"))
		if err != nil {
			return nil, err
		}
		if g.Empty() {
			_ = g.Close()
		} else {
			n.GPUs = g
			for i, d := range g.Devices() {
				n.GPUDevices = append(n.GPUDevices, d.PCIBusID)
				n.GPUAccels = append(n.GPUAccels, d.Index)
				n.zones[d.Key()] = i
			}
		}
	}
	pc := cfg.Power
	pc.GPUDevices, pc.GPUAccels = n.GPUDevices, n.GPUAccels
	pc.GPUPending = n.GPUs != nil && n.GPUs.Pending()
	sys := pc.SysfsRoot
	if sys == "" {
		sys = "/sys"
	}
	pc.APUs = sysfs.APUs(sys)
	m, err := discover.Open(ctx, pc, log.Named("power"))
	if err != nil {
		_ = n.Close()
		return nil, fmt.Errorf("power meter: %w", err)
	}
	n.Meter = m
	eachMeter(m, func(x power.Meter) {
		if g, ok := gpuSocketsOf(x); ok {
			for _, z := range g.GPUSockets() {
				n.reserved[z] = true
			}
		}
	})
	if n.GPUs != nil {
		pm, hw := pmCounters(m), hwmonCached(m)
		if pm != nil || hw != nil {
			// What the meters leave out follows the GPU sources' state,
			// not only their state at start: a source that comes up
			// later (NVML recovering, a card found after start) takes
			// its devices from pm_counters and hwmon then, each switch
			// made at one reading of the meter, so the device's energy
			// is counted once, by the meter up to the switch and by the
			// source after it.
			n.GPUs.OnDevices(func(devs []reading.GPUDevice, at time.Time) {
				read := make(map[int]bool, len(devs))
				pci := make(map[string]bool, len(devs))
				for _, d := range devs {
					read[d.Index] = true
					if d.PCIBusID != "" {
						pci[gpu.NormPCI(d.PCIBusID)] = true
					}
				}
				if pm != nil {
					pm.SkipAccels(read)
				}
				if hw != nil {
					hw.LeaveOutDevices(pci, at)
				}
			})
		}
	}
	return n, nil
}

// eachMeter calls f with m and every meter m combines.
func eachMeter(m power.Meter, f func(power.Meter)) {
	f(m)
	if c, ok := m.(interface{ Meters() []power.Meter }); ok {
		for _, x := range c.Meters() {
			eachMeter(x, f)
		}
	}
}

type gpuSocketer interface{ GPUSockets() []int }

// gpuSocketsOf is what numbers a meter's GPU zones: the meter itself
// (pm_counters) or the reader a cached meter reads (hwmon).
func gpuSocketsOf(m power.Meter) (gpuSocketer, bool) {
	if g, ok := m.(gpuSocketer); ok {
		return g, true
	}
	if c, ok := m.(*power.Cached); ok {
		g, ok := c.Reader().(gpuSocketer)
		return g, ok
	}
	return nil, false
}

// pmCounters finds the pm_counters meter among the meters m combines.
func pmCounters(m power.Meter) *power.PMCounters {
	var pm *power.PMCounters
	eachMeter(m, func(x power.Meter) {
		if p, ok := x.(*power.PMCounters); ok && pm == nil {
			pm = p
		}
	})
	return pm
}

// hwmonCached finds the hwmon meter (hwmon read in the background) among
// the meters m combines.
func hwmonCached(m power.Meter) *power.Cached {
	var hw *power.Cached
	eachMeter(m, func(x power.Meter) {
		if c, ok := x.(*power.Cached); ok && hw == nil {
			if _, ok := c.Reader().(*power.Hwmon); ok {
				hw = c
			}
		}
	})
	return hw
}

// GPUZone is the zone socket of a device the GPU sources read: its place
// in GPUDevices, as the exporter's GPU stage numbers its zones. A device
// not seen at Open (a source that came up later, a card found after
// start) gets the lowest number that neither another device nor a
// meter's GPU zone has, kept from then on, so no two sources share a
// zone identity.
func (n *Node) GPUZone(d reading.GPUDevice) int {
	k := d.Key()
	if z, ok := n.zones[k]; ok {
		return z
	}
	taken := maps.Clone(n.reserved)
	for _, z := range n.zones {
		taken[z] = true
	}
	z := 0
	for taken[z] {
		z++
	}
	n.zones[k] = z
	return z
}

// Close closes the meter and the GPU sources.
func (n *Node) Close() error {
	if c, ok := n.Meter.(io.Closer); ok {
		_ = c.Close()
	}
	if n.GPUs != nil {
		_ = n.GPUs.Close()
	}
	return nil
}
