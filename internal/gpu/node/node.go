// Package node is the node's GPUs for the stats loop: it opens the GPU
// sources and allocation sources a Config asks for, and each interval
// reads every device and resolves who holds it. The split into idle and
// per-process dynamic energy is the stats loop's (internal/stats/gpu.go): a
// source delivers readings, never attributions. The stats loop calls Open
// once and Interval once per interval; nothing else.
package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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
	onDevices func([]reading.GPUDevice, time.Time)
	seen      map[string]bool
	// late are the source kinds that had no device at Open, tried again
	// by Interval; maybe: the node has a GPU no source could read at
	// Open (a driver still loading, an unreadable DRM class), so the
	// GPUs are kept and devices may come.
	late  []*lateSource
	maybe bool
}

// lateSource is a GPU source kind not open yet: open is tried again at
// next, then after wait, doubling up to maxLateWait.
type lateSource struct {
	name string
	open func() (gpu.Source, error)
	next time.Time
	wait time.Duration
}

// maxLateWait bounds the wait between two tries of a source kind that
// had no device.
const maxLateWait = time.Minute

// openNVML opens the NVIDIA source (tests open it on go-nvml's mock).
var openNVML = nvml.Open

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
	nvOpts := nvml.Options{Mode: cfg.NVML, MaxWatts: cfg.MaxWatts, SampleEvery: cfg.SampleEvery}
	sysOpts := sysfs.Options{Mode: cfg.Sysfs, SysfsRoot: cfg.SysfsRoot, ProcfsRoot: cfg.ProcfsRoot, MaxWatts: cfg.MaxWatts,
		SampleEvery: cfg.SampleEvery, Rescan: cfg.Rescan}
	var srcs []gpu.Source
	var late []*lateSource
	if s, err := openNVML(nvOpts, quiet); err != nil {
		return nil, fmt.Errorf("gpu.nvml: %w", err)
	} else if s != nil {
		srcs = append(srcs, s)
	} else if cfg.NVML != "off" {
		late = append(late, &lateSource{name: "nvml", open: func() (gpu.Source, error) { return openNVML(nvOpts, zap.NewNop()) }})
	}
	s, err := sysfs.Open(sysOpts, quiet)
	if err != nil {
		return nil, fmt.Errorf("gpu.sysfs: %w", err)
	}
	if s != nil {
		srcs = append(srcs, s)
	} else if cfg.Sysfs != "off" {
		late = append(late, &lateSource{name: "sysfs", open: func() (gpu.Source, error) {
			s, err := sysfs.Open(sysOpts, zap.NewNop())
			if s == nil {
				return nil, err // not a typed nil
			}
			return s, err
		}})
	}
	maybe := false
	if len(srcs) == 0 && len(late) > 0 {
		maybe = gpuOnBus(cfg.SysfsRoot) || drmUnreadable(cfg.SysfsRoot)
	}
	if len(srcs) == 0 && !maybe {
		log.Info("GPU sources off: no NVIDIA device through NVML and no amdgpu, i915 or xe card with an energy or power sensor",
			zap.String("gpu.nvml", cfg.NVML), zap.String("gpu.sysfs", cfg.Sysfs))
	} else if len(srcs) == 0 {
		log.Info("GPU sources waiting: the node has a GPU no source reads yet (a driver still loading?); looking again in the background",
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
	g.late, g.maybe = late, maybe
	return g, nil
}

// gpuOnBus: a GPU (a display or 3D controller of NVIDIA, AMD or Intel)
// is on the PCI bus that a source may read later: no driver serves it
// yet (one still loading), NVIDIA's driver does (NVML still coming up),
// or amdgpu, i915 or xe does but has not registered its DRM card yet. A
// device bound to another driver (vfio-pci for a VM's passthrough,
// nouveau, a BMC's ast) is never one.
func gpuOnBus(sysfsRoot string) bool {
	if sysfsRoot == "" {
		sysfsRoot = "/sys"
	}
	dir := filepath.Join(sysfsRoot, "bus", "pci", "devices")
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		dev := filepath.Join(dir, e.Name())
		class, err := os.ReadFile(filepath.Join(dev, "class"))
		if err != nil {
			continue
		}
		c := strings.TrimSpace(string(class))
		if !strings.HasPrefix(c, "0x0300") && !strings.HasPrefix(c, "0x0302") && !strings.HasPrefix(c, "0x0380") {
			continue
		}
		vendor, _ := os.ReadFile(filepath.Join(dev, "vendor"))
		switch strings.TrimSpace(string(vendor)) {
		case "0x10de", "0x1002", "0x8086":
		default:
			continue
		}
		drv, err := os.Readlink(filepath.Join(dev, "driver"))
		if err != nil {
			return true // no driver yet
		}
		switch filepath.Base(drv) {
		case "nvidia":
			return true
		case "amdgpu", "i915", "xe":
			if _, err := os.Stat(filepath.Join(dev, "drm")); err != nil {
				return true
			}
		}
	}
	return false
}

// drmUnreadable: the DRM class is there but cannot be listed (the sysfs
// source then reads nothing, for now).
func drmUnreadable(sysfsRoot string) bool {
	if sysfsRoot == "" {
		sysfsRoot = "/sys"
	}
	_, err := os.ReadDir(filepath.Join(sysfsRoot, "class", "drm"))
	return err != nil && !errors.Is(err, fs.ErrNotExist)
}

// tryLate tries the source kinds that had no device, each when its wait
// is over; a source that now has devices joins the others, and its
// devices are read from this interval on (their first reading is their
// baseline). It reports whether one joined.
func (g *GPUs) tryLate(now time.Time) bool {
	joined := false
	every := g.cfg.Rescan
	if every <= 0 {
		every = 5 * time.Second
	}
	kept := g.late[:0]
	for _, l := range g.late {
		switch {
		case l.next.IsZero():
			// Open has just tried.
			l.wait = every
			l.next = now.Add(l.wait)
		case !now.Before(l.next):
			src, err := l.open()
			if err == nil && src != nil {
				g.sources = append(g.sources, src)
				g.log.Info("GPU source on, found after start", zap.String("source", src.Name()), zap.Int("devices", len(src.Devices())))
				joined = true
				continue
			}
			l.wait = min(2*l.wait, max(maxLateWait, every))
			l.next = now.Add(l.wait)
		}
		kept = append(kept, l)
	}
	g.late = kept
	return joined
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

// Empty reports that no GPU source is open and none is awaited: the node
// has no GPU (or they are off). A source that is open but down (an NVML
// error it retries) has no devices yet and still counts, as does a GPU
// on the PCI bus that no source reads yet (a driver still loading).
func (g *GPUs) Empty() bool { return len(g.sources) == 0 && !g.maybe }

// Pending reports whether devices may come later: a source is open but
// down (NVML failing at start, retried in the background), or the node
// has a GPU no source could read at Open.
func (g *GPUs) Pending() bool {
	if len(g.sources) == 0 && g.maybe {
		return true
	}
	for _, s := range g.sources {
		if d, ok := s.(interface{ Down() error }); ok && d.Down() != nil {
			return true
		}
	}
	return false
}

// OnDevices calls f, from Interval, with the devices read whenever they
// change from the interval before (the first interval included), and
// the interval's instant, so that what other sources leave out follows
// the GPU sources' state and switches at the instant a new device's
// first reading (its baseline) is taken. A source opened after start
// is told of before it is read.
func (g *GPUs) OnDevices(f func(devs []reading.GPUDevice, at time.Time)) { g.onDevices = f }

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
	if len(g.late) > 0 && g.tryLate(now) {
		// A source found now: the others let go of its devices before
		// it takes its first reading, not after its read (a scan of
		// every process's DRM clients, which can take a while).
		g.devicesChanged(g.Devices(), now)
	}
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
	defer g.devicesChanged(devs, now)
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
func (g *GPUs) devicesChanged(devs []reading.GPUDevice, at time.Time) {
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
	g.onDevices(devs, at)
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
