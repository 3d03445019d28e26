// Package sysfs reads AMD (amdgpu) and Intel (i915, xe) GPUs from sysfs
// and procfs, with no vendor library: each DRM card is its own device with
// its PCI address; its energy comes from the card's hwmon and its
// per-process usage from the kernel's DRM client stats (package fdinfo).
//
// Energy, per driver (docs/gpu.md):
//   - i915: energy1_input, µJ, cumulative (discrete cards; the GPU's own
//     counter).
//   - xe: energy1_input is the whole card ("card" in energy1_label) and
//     energy2_input the GPU package ("pkg"); the card channel is used when
//     present, as it is what the card draws from the slot and connectors.
//   - amdgpu: power1_average (the SMU's running average), else power1_input
//     (instantaneous, newer ASICs), µW, integrated over the interval.
package sysfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/gpu"
	"github.com/wattrace/wattrace/pkg/gpu/fdinfo"
	"github.com/wattrace/wattrace/pkg/reading"
)

// Options configures the sysfs source.
type Options struct {
	// Mode is "auto" or "off".
	Mode string
	// SysfsRoot and ProcfsRoot default to /sys and /proc.
	SysfsRoot, ProcfsRoot string
	// MaxWatts is the per-card power ceiling (gpu.DefaultMaxWatts if 0).
	MaxWatts float64
	// SampleEvery is how often a card that gives only power (amdgpu) is
	// sampled in the background, for the trapezoid rule
	// (power.meter-interval); 0 samples only at each Read.
	SampleEvery time.Duration
	// Rescan is how often Read looks for cards that appeared after start
	// (0: every 5 s; negative: never).
	Rescan time.Duration
}

var cardRE = regexp.MustCompile(`^card[0-9]+$`)

var drivers = map[string]reading.GPUVendor{"amdgpu": reading.VendorAMD, "i915": reading.VendorIntel, "xe": reading.VendorIntel}

type card struct {
	dev   reading.GPUDevice
	meter *gpu.Meter
	// file is the hwmon file read; counter says µJ cumulative (else µW).
	file    string
	counter bool
	// usage merges DRM and KFD usage (reused).
	usage map[int]float64
	// For power cards: the samples integrated with the trapezoid rule
	// (shared with NVML's power boards), and why the latest sample
	// failed or was rejected.
	pw        gpu.Trapezoid
	sampleErr error
	// busy is amdgpu's gpu_busy_percent, the whole card's utilization
	// (graphics, DRM and ROCm/KFD work alike); "" when absent.
	busy string
}

// Source reads the DRM cards found at Open and those that appear later
// (rescan).
type Source struct {
	scanner *fdinfo.Scanner
	debugfs string
	cards   []*card
	list    []reading.GPUDevice
	rejects *reading.Rejects
	tracker *fdinfo.Tracker
	now     time.Time
	scanErr error
	log     *zap.Logger
	// reason is the health reason while DRM clients are unreadable
	// ("fdinfo_no_permission"), or while KFD processes' compute cannot be
	// attributed ("kfd_unattributed"); warned and kfdWarned: the one log
	// line of each was written.
	reason            string
	warned, kfdWarned bool
	// kfd is the KFD topology's GPUs by PCI address; kfdUse is each
	// card's KFD usage of the interval (pid → ns), reused.
	sysRoot string
	kfd     map[string]kfdNode
	kfdUse  map[string]map[int]float64
	lastT   time.Time
	// mu guards the power cards' integration, which the sampler
	// goroutine (stop ends it) shares with Read.
	mu      sync.Mutex
	maxW    float64
	stop    chan struct{}
	stopped chan struct{}
	// drm is the DRM class directory; known are the cards read (by
	// name), told the skipped ones already logged; nextScan is when Read
	// next looks for new cards.
	drm      string
	opts     Options
	known    map[string]bool
	told     map[string]bool
	nextScan time.Time
}

// Open finds amdgpu, i915 and xe cards with an energy or power hwmon file.
// None found (or Mode "off") gives a nil Source and no error.
func Open(opts Options, log *zap.Logger) (*Source, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if opts.Mode == "off" {
		return nil, nil
	}
	if opts.SysfsRoot == "" {
		opts.SysfsRoot = "/sys"
	}
	if opts.ProcfsRoot == "" {
		opts.ProcfsRoot = "/proc"
	}
	drm := filepath.Join(opts.SysfsRoot, "class", "drm")
	ents, err := os.ReadDir(drm)
	if errors.Is(err, os.ErrNotExist) {
		log.Info("DRM GPU source off: no " + drm)
		return nil, nil
	}
	if err != nil {
		// An unreadable DRM class (an odd mount, a broken sysfs) costs
		// the DRM GPUs only: the exporter and measure start without
		// them rather than not at all.
		log.Warn("DRM GPU source off: cannot list the DRM cards", zap.String("dir", drm), zap.Error(err))
		return nil, nil
	}
	rej := reading.NewRejects("gpu-sysfs", log)
	s := &Source{log: log, sysRoot: opts.SysfsRoot, kfdUse: map[string]map[int]float64{}, scanner: fdinfo.NewScanner(opts.ProcfsRoot), debugfs: filepath.Join(opts.SysfsRoot, "kernel", "debug"), rejects: rej, tracker: fdinfo.NewTracker(rej),
		drm: drm, opts: opts, known: map[string]bool{}}
	s.maxW = opts.MaxWatts
	if s.maxW <= 0 {
		s.maxW = gpu.DefaultMaxWatts
	}
	s.addCards(ents, log)
	if len(s.cards) == 0 {
		log.Info("DRM GPU source off: no amdgpu, i915 or xe card with an energy or power sensor")
		return nil, nil
	}
	log.Info("DRM GPU source on", zap.Int("devices", len(s.cards)))
	return s, nil
}

// rescanEvery is how often Read looks for cards that appeared after
// start (hot-plug, a driver that bound late) unless Options.Rescan says.
const rescanEvery = 5 * time.Second

// addCards probes the cards of the DRM class listing ents that are not
// read yet and adds those with an energy or power sensor; a card that
// has none (yet) is probed again at the next rescan.
func (s *Source) addCards(ents []os.DirEntry, log *zap.Logger) []reading.GPUDevice {
	var fresh []*card
	var ordinal map[string]int
	for _, e := range ents {
		if !cardRE.MatchString(e.Name()) || s.known[e.Name()] {
			continue
		}
		if ordinal == nil {
			ordinal = gpuOrdinals(s.drm, ents)
			s.kfd = kfdTopology(s.sysRoot)
		}
		c, why := probe(filepath.Join(s.drm, e.Name()), e.Name())
		if c != nil {
			c.dev.Index = ordinal[e.Name()]
		}
		if c != nil && s.kfd[c.dev.PCIBusID].APU {
			c, why = nil, "an APU: its power sensor reports the whole socket, CPU included, which the CPU's package zone counts"
		}
		if c == nil {
			if why != "" && !s.told[e.Name()] {
				log.Info("DRM card skipped", zap.String("card", e.Name()), zap.String("why", why))
				if s.told == nil {
					s.told = map[string]bool{}
				}
				s.told[e.Name()] = true
			}
			continue
		}
		c.meter = gpu.NewMeter("gpu-sysfs/"+c.dev.PCIBusID, s.opts.MaxWatts, s.rejects)
		s.known[e.Name()] = true
		fresh = append(fresh, c)
	}
	if len(fresh) == 0 {
		return nil
	}
	slices.SortFunc(fresh, func(a, b *card) int { return a.dev.Index - b.dev.Index })
	var devs []reading.GPUDevice
	s.mu.Lock()
	for _, c := range fresh {
		s.cards = append(s.cards, c)
		s.list = append(s.list, c.dev)
		devs = append(devs, c.dev)
	}
	s.mu.Unlock()
	if s.opts.SampleEvery > 0 && s.stop == nil && slices.ContainsFunc(fresh, func(c *card) bool { return !c.counter }) {
		s.stop, s.stopped = make(chan struct{}), make(chan struct{})
		go s.sampler(s.opts.SampleEvery)
	}
	return devs
}

// rescan adds the cards that appeared since the last look, at most every
// Options.Rescan (a directory listing, and a probe of each card not read).
func (s *Source) rescan(now time.Time) {
	every := s.opts.Rescan
	if every == 0 {
		every = rescanEvery
	}
	if every < 0 || now.Before(s.nextScan) {
		return
	}
	s.nextScan = now.Add(every)
	ents, err := os.ReadDir(s.drm)
	if err != nil {
		return
	}
	for _, d := range s.addCards(ents, s.log) {
		s.log.Info("DRM GPU found after start", zap.String("device", d.PCIBusID), zap.Int("index", d.Index))
	}
}

// sampler samples the power cards every interval until Close.
func (s *Source) sampler(every time.Duration) {
	defer close(s.stopped)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.sample(now)
		}
	}
}

// sample reads every power card once at now and keeps the reading for
// the next Read to integrate: an amdgpu card's energy is then measured at
// the meter interval, not one sample per stats interval multiplied out. A
// failed or rejected sample is skipped (the next one spans the gap).
func (s *Source) sample(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.cards {
		if c.counter {
			continue
		}
		v, err := readUint(c.file)
		c.sampleErr = err
		if err != nil {
			continue
		}
		w := float64(v) / 1e6
		if err := reading.CheckGauge(w, s.maxW); err != nil {
			s.rejects.Add(err, c.dev.PCIBusID+" power")
			c.sampleErr = err
			continue
		}
		c.pw.Add(now, w)
	}
}

// probe returns the card at dir, or nil and why not ("" for cards of
// drivers we do not read, which are not worth a log line).
// gpuOrdinals numbers the DRM cards bound to a GPU driver (amdgpu, i915,
// xe) 0, 1, … in card order: a device's index is its place among the
// node's GPUs, as Slurm's GPU index and ROCm's are, not its DRM card
// number, which a BMC's VGA device (ast, mgag200: card0 on many servers)
// shifts by one.
func gpuOrdinals(drm string, ents []os.DirEntry) map[string]int {
	var nums []int
	for _, e := range ents {
		if !cardRE.MatchString(e.Name()) {
			continue
		}
		drv, err := os.Readlink(filepath.Join(drm, e.Name(), "device", "driver"))
		if err != nil {
			continue
		}
		if _, ok := drivers[filepath.Base(drv)]; !ok {
			continue
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(e.Name(), "card"))
		nums = append(nums, n)
	}
	slices.Sort(nums)
	out := make(map[string]int, len(nums))
	for i, n := range nums {
		out[fmt.Sprintf("card%d", n)] = i
	}
	return out
}

func probe(dir, name string) (*card, string) {
	devDir := filepath.Join(dir, "device")
	pciDir, err := filepath.EvalSymlinks(devDir)
	if err != nil {
		return nil, "no device link"
	}
	drv, err := os.Readlink(filepath.Join(devDir, "driver"))
	if err != nil {
		return nil, ""
	}
	vendor, ok := drivers[filepath.Base(drv)]
	if !ok {
		return nil, ""
	}
	idx, _ := strconv.Atoi(strings.TrimPrefix(name, "card"))
	c := &card{dev: reading.GPUDevice{
		Index:    idx,
		PCIBusID: gpu.NormPCI(filepath.Base(pciDir)),
		Vendor:   vendor,
		Source:   "sysfs",
		Model:    filepath.Base(drv) + " " + strings.TrimSpace(readStr(filepath.Join(devDir, "device"))),
	}}
	if vendor == reading.VendorAMD {
		if p := filepath.Join(devDir, "gpu_busy_percent"); exists(p) {
			c.busy = p
		}
	}
	hw, _ := filepath.Glob(filepath.Join(devDir, "hwmon", "hwmon*"))
	slices.Sort(hw)
	for _, h := range hw {
		// xe: prefer the channel labelled "card" over "pkg".
		for _, ch := range []string{"1", "2"} {
			if strings.TrimSpace(readStr(filepath.Join(h, "energy"+ch+"_label"))) == "card" {
				c.file, c.counter = filepath.Join(h, "energy"+ch+"_input"), true
				return c, ""
			}
		}
		for _, f := range []string{"energy1_input", "power1_average", "power1_input"} {
			p := filepath.Join(h, f)
			if _, err := os.Stat(p); err == nil {
				c.file, c.counter = p, strings.HasPrefix(f, "energy")
				return c, ""
			}
		}
	}
	return nil, "no energy or power sensor in hwmon"
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func readStr(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func (s *Source) Name() string                 { return "sysfs" }
func (s *Source) Devices() []reading.GPUDevice { return slices.Clone(s.list) }
func (s *Source) Close() error {
	if s.stop != nil {
		close(s.stop)
		<-s.stopped
		s.stop = nil
	}
	return nil
}
func (s *Source) Rejects() *reading.Rejects { return s.rejects }

// Health reports one entry per card.
func (s *Source) Health() []reading.SourceHealth {
	out := make([]reading.SourceHealth, 0, len(s.cards))
	rej := s.rejects.Counts()
	for _, c := range s.cards {
		h := c.meter.Health(s.now)
		h.Rejected = rej
		h.Reason = s.reason
		out = append(out, h)
	}
	return out
}

// Read returns every card's reading for the interval ending at now. The
// usage maps are reused by the next Read.
//
// A card not reached before ctx is done (the stats loop's step deadline)
// is not read: its reading is not OK, its meter counts the read late, and
// its next reading spans the gap.
func (s *Source) Read(ctx context.Context, now time.Time) ([]reading.GPUReading, error) {
	s.now = now
	s.rescan(now)
	pids, ok := fdinfo.DebugfsPIDs(s.debugfs)
	if !ok {
		pids = nil
	}
	clients, err := s.scanner.Scan(pids)
	s.scanErr = err
	s.reason = ""
	if n := s.scanner.Denied(); n > 0 {
		// Other users' DRM clients are missing: attribution is partial,
		// and health says so rather than showing their share as idle.
		s.reason = "fdinfo_no_permission"
		if !s.warned {
			s.warned = true
			s.log.Warn("cannot read other users' DRM clients (/proc/PID/fd, fdinfo) for lack of permission: per-process GPU energy is incomplete; grant CAP_SYS_PTRACE (docs/gpu.md)",
				zap.Int("processes", n))
		}
	}
	usage := s.tracker.Update(clients, now)
	for _, m := range s.kfdUse {
		clear(m)
	}
	var dt time.Duration
	if !s.lastT.IsZero() {
		dt = now.Sub(s.lastT)
	}
	s.lastT = now
	if len(s.kfd) > 0 {
		if n := kfdUsage(s.sysRoot, s.kfd, dt, s.kfdUse); n > 0 && s.reason == "" {
			// ROCm work the kernel does not report per process: its
			// energy stays unattributed, and health says why.
			s.reason = "kfd_unattributed"
			if !s.kfdWarned {
				s.kfdWarned = true
				s.log.Warn("KFD (ROCm) processes use a GPU without a cu_occupancy this kernel reports: their compute energy is unattributed",
					zap.Int("processes", n))
			}
		}
	}
	out := make([]reading.GPUReading, 0, len(s.cards))
	for _, c := range s.cards {
		if err := ctx.Err(); err != nil {
			c.meter.Fail(fmt.Errorf("not read before the deadline: %w", err), now)
			m := reading.MethodPowerIntegrated
			if c.counter {
				m = reading.MethodCounter
			}
			out = append(out, reading.GPUReading{Device: c.dev, Method: m, Interval: c.meter.Interval(), UsageUnknown: true})
			continue
		}
		r := reading.GPUReading{Device: c.dev, Method: reading.MethodPowerIntegrated, Basis: reading.BasisEngineTime}
		if c.counter {
			r.Method = reading.MethodCounter
		}
		if c.counter {
			v, err := readUint(c.file)
			if err != nil {
				c.meter.Fail(err, now)
			} else {
				r.EnergyJ, r.OK = c.meter.Counter(float64(v)/1e6, now)
			}
		} else {
			// The power integrated since the previous read, the
			// interval's end sampled now, through the meter's counter
			// validation as any energy counter.
			s.sample(now)
			s.mu.Lock()
			j, at := c.pw.Integrate(now)
			serr := c.sampleErr
			s.mu.Unlock()
			r.EnergyJ, r.OK = c.meter.Integrated(j, at, serr, now)
		}
		r.Interval, r.PowerW = c.meter.Interval(), c.meter.PowerW()
		if u := usage[c.dev.PCIBusID]; u != nil {
			r.Usage, r.Utilization = u.ByPID, u.Utilization
		}
		if n, ok := s.kfd[c.dev.PCIBusID]; ok && n.GPUID != 0 {
			// ROCm submits through /dev/kfd, which DRM fdinfo does not
			// see: its processes' compute share joins the DRM clients'.
			r.Basis = reading.BasisEngineTimeKFD
			if k := s.kfdUse[c.dev.PCIBusID]; len(k) > 0 {
				if c.usage == nil {
					c.usage = map[int]float64{}
				}
				clear(c.usage)
				for pid, w := range r.Usage {
					c.usage[pid] += w
				}
				for pid, w := range k {
					c.usage[pid] += w
				}
				r.Usage = c.usage
			}
		}
		// i915 and xe work is all DRM clients', so the busiest engine's
		// share is the card's utilization when every process could be
		// read; amdgpu's ROCm work is not in fdinfo, so only its own
		// gpu_busy_percent says how busy the card is.
		r.UtilizationKnown = c.dev.Vendor == reading.VendorIntel && err == nil && s.reason == ""
		// Unreadable clients (fdinfo without permission) or ROCm work
		// the kernel does not report per process: no client seen does
		// not mean no process used the card.
		r.UsageUnknown = err != nil || s.reason != ""
		if c.busy != "" {
			r.Utilization, r.UtilizationKnown = 0, false
			if v, berr := readUint(c.busy); berr == nil {
				if cerr := reading.CheckGauge(float64(v), 100); cerr == nil {
					r.Utilization, r.UtilizationKnown = float64(v)/100, true
				} else {
					s.rejects.Add(cerr, c.dev.PCIBusID+" gpu_busy_percent")
				}
			}
		}
		out = append(out, r)
	}
	return out, err
}

func readUint(p string) (uint64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, reading.Reject(reading.Unreadable, 0, "%s: %v", p, err)
	}
	return v, nil
}
