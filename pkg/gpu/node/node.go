// Package node is the node's GPUs for the stats loop: it opens the GPU
// sources and allocation sources a Config asks for, and each interval
// reads every device and resolves who holds it. The split into idle and
// per-process dynamic energy is the stats loop's (pkg/stats/gpu.go): a
// source delivers readings, never attributions. The stats loop calls Open
// once and Interval once per interval; nothing else.
package node

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/gpu"
	"github.com/wattrace/wattrace/pkg/gpu/alloc"
	"github.com/wattrace/wattrace/pkg/gpu/nvml"
	"github.com/wattrace/wattrace/pkg/gpu/sysfs"
	"github.com/wattrace/wattrace/pkg/reading"
)

// GPUs is the node's GPUs. Owned by the stats loop's goroutine.
type GPUs struct {
	cfg     Config
	log     *zap.Logger
	sources []gpu.Source
	allocs  []alloc.Source
	out     reading.GPUInterval
	aHealth map[string]*reading.SourceHealth
	closers []func() error
	// warned: allocation sources whose missing permission was logged.
	warned map[string]bool
	// onDevices is called from Interval when the devices read change
	// (a source came up or went down); seen is the last set, by key.
	onDevices func([]reading.GPUDevice)
	seen      map[string]bool
}

// denier is an allocation source that reads other users' processes and
// says how many it could not read for lack of permission.
type denier interface{ Denied() int }

// Open validates cfg and opens what it asks for. With no GPU found it
// returns a GPUs with no devices (Interval returns nothing), never an
// error: a node without GPUs is normal.
func Open(cfg Config, log *zap.Logger) (*GPUs, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	// The sources' own start-up lines are folded into the one line below:
	// a node without GPUs (most nodes) says so once, at info.
	quiet := log.WithOptions(zap.IncreaseLevel(zap.WarnLevel))
	var srcs []gpu.Source
	if s, err := nvml.Open(nvml.Options{Mode: cfg.NVML, MaxWatts: cfg.MaxWatts, SampleEvery: cfg.SampleEvery}, quiet); err != nil {
		return nil, fmt.Errorf("gpu.nvml: %w", err)
	} else if s != nil {
		srcs = append(srcs, s)
	}
	s, err := sysfs.Open(sysfs.Options{Mode: cfg.Sysfs, SysfsRoot: cfg.SysfsRoot, ProcfsRoot: cfg.ProcfsRoot, MaxWatts: cfg.MaxWatts,
		SampleEvery: cfg.SampleEvery}, quiet)
	if err != nil {
		return nil, fmt.Errorf("gpu.sysfs: %w", err)
	}
	if s != nil {
		srcs = append(srcs, s)
	}
	if len(srcs) == 0 {
		log.Info("GPU sources off: no NVIDIA device through NVML and no amdgpu, i915 or xe card with an energy or power sensor",
			zap.String("gpu.nvml", cfg.NVML), zap.String("gpu.sysfs", cfg.Sysfs))
	} else {
		for _, s := range srcs {
			log.Info("GPU source on", zap.String("source", s.Name()), zap.Int("devices", len(s.Devices())))
		}
	}
	// Precedence: a passed-through device is the VM's whatever else
	// claims it, then pods, then Slurm jobs.
	var as []alloc.Source
	var closers []func() error
	if cfg.LibvirtRunDir != "" {
		as = append(as, &alloc.Libvirt{RunDir: cfg.LibvirtRunDir, SysfsRoot: cfg.SysfsRoot})
	}
	if cfg.PodResourcesSocket != "" {
		k, err := alloc.NewKubelet(cfg.PodResourcesSocket, 0)
		if err != nil {
			return nil, fmt.Errorf("gpu.pod-resources-socket: %w", err)
		}
		as = append(as, k)
		closers = append(closers, k.Close)
	}
	if cfg.Slurm {
		om, _ := alloc.ParseOrderMap(cfg.SlurmGPUOrderMap) // validated above
		as = append(as, &alloc.Slurm{ProcRoot: cfg.ProcfsRoot, Order: om})
	}
	g := New(cfg, srcs, as, log)
	g.closers = closers
	return g, nil
}

// New assembles GPUs from sources already opened (tests, benchmarks).
func New(cfg Config, srcs []gpu.Source, allocs []alloc.Source, log *zap.Logger) *GPUs {
	if log == nil {
		log = zap.NewNop()
	}
	return &GPUs{cfg: cfg, log: log, sources: srcs, allocs: allocs, aHealth: map[string]*reading.SourceHealth{}, warned: map[string]bool{}}
}

// Config returns the configuration GPUs was opened with (the stats stage
// takes its idle models and policy from it).
func (g *GPUs) Config() Config { return g.cfg }

// Empty reports that no GPU source is open: the node has no GPU (or
// they are off). A source that is open but down (an NVML error it
// retries) has no devices yet and still counts.
func (g *GPUs) Empty() bool { return len(g.sources) == 0 }

// Pending reports whether a source is open but down (NVML failing at
// start, retried in the background): it may list devices later.
func (g *GPUs) Pending() bool {
	for _, s := range g.sources {
		if d, ok := s.(interface{ Down() error }); ok && d.Down() != nil {
			return true
		}
	}
	return false
}

// OnDevices calls f, from Interval, with the devices read whenever they
// change from the interval before (the first interval included), so
// that what other sources leave out follows the GPU sources' state.
func (g *GPUs) OnDevices(f func([]reading.GPUDevice)) { g.onDevices = f }

// Devices lists every device of every source.
func (g *GPUs) Devices() []reading.GPUDevice {
	var out []reading.GPUDevice
	for _, s := range g.sources {
		out = append(out, s.Devices()...)
	}
	return out
}

// Interval reads and resolves every device for the interval
// ending at now. The result is reused by the next call.
func (g *GPUs) Interval(ctx context.Context, now time.Time) *reading.GPUInterval {
	g.out.Health = g.out.Health[:0]
	var readings []reading.GPUReading
	for _, s := range g.sources {
		rs, err := s.Read(ctx, now)
		if err != nil {
			g.log.Debug("GPU source read", zap.String("source", s.Name()), zap.Error(err))
		}
		readings = append(readings, rs...)
		g.out.Health = append(g.out.Health, s.Health()...)
	}
	var allocs []alloc.Allocation
	for _, a := range g.allocs {
		as, err := a.Allocations(ctx)
		h := g.aHealth[a.Name()]
		if h == nil {
			h = &reading.SourceHealth{Source: "gpu-alloc/" + a.Name()}
			g.aHealth[a.Name()] = h
		}
		h.Reads++
		h.Up = err == nil
		if err != nil {
			h.Errors++
			g.log.Debug("GPU allocations", zap.String("source", a.Name()), zap.Error(err))
		}
		h.Reason = ""
		if d, ok := a.(denier); ok && d.Denied() > 0 {
			// Jobs of other users are missing: health says so, and one
			// line in the log, rather than an empty allocation list.
			h.Reason = "environ_no_permission"
			if !g.warned[a.Name()] {
				g.warned[a.Name()] = true
				g.log.Warn("cannot read other users' /proc/PID/environ for lack of permission: their GPU allocations are missing; grant CAP_SYS_PTRACE (docs/gpu.md)",
					zap.String("source", a.Name()), zap.Int("processes", d.Denied()))
			}
		}
		allocs = append(allocs, as...)
		g.out.Health = append(g.out.Health, *h)
	}
	devs := make([]reading.GPUDevice, len(readings))
	defer g.devicesChanged(devs)
	mig := map[string]string{}
	for i, r := range readings {
		devs[i] = r.Device
		for _, in := range r.Instances {
			if in.UUID != "" {
				mig[in.UUID] = in.Name
			}
		}
	}
	held := alloc.ResolveAll(devs, allocs, mig)
	for len(g.out.Devices) < len(readings) {
		g.out.Devices = append(g.out.Devices, reading.HeldGPUReading{})
	}
	g.out.Devices = g.out.Devices[:len(readings)]
	for i, r := range readings {
		d := &g.out.Devices[i]
		d.Reading = r
		as := held[alloc.Key{Device: r.Device.Key()}]
		d.Holders, d.Holder, d.HasHolder, d.Whole = d.Holders[:0], reading.Holder{}, len(as) > 0, false
		for _, a := range as {
			d.Holders = append(d.Holders, a.Holder)
			d.Whole = d.Whole || a.Whole
		}
		if d.HasHolder {
			d.Holder = as[0].Holder
		}
		clear(d.InstanceHolders)
		for _, in := range r.Instances {
			for _, ia := range held[alloc.Key{Device: r.Device.Key(), Instance: in.Name}] {
				if d.InstanceHolders == nil {
					d.InstanceHolders = map[string][]reading.Holder{}
				}
				d.InstanceHolders[in.Name] = append(d.InstanceHolders[in.Name], ia.Holder)
			}
		}
	}
	return &g.out
}

// devicesChanged tells OnDevices' function of a change in the devices
// read.
func (g *GPUs) devicesChanged(devs []reading.GPUDevice) {
	if g.onDevices == nil {
		return
	}
	changed := g.seen == nil || len(devs) != len(g.seen)
	for _, d := range devs {
		changed = changed || !g.seen[d.Key()]
	}
	if !changed {
		return
	}
	g.seen = make(map[string]bool, len(devs))
	for _, d := range devs {
		g.seen[d.Key()] = true
	}
	g.onDevices(devs)
}

// Close closes every source.
func (g *GPUs) Close() error {
	for _, s := range g.sources {
		s.Close()
	}
	for _, c := range g.closers {
		c()
	}
	return nil
}
