//go:build cgo

package nvml

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/gpu"
	"github.com/wattrace/wattrace/pkg/reading"
)

// Optional NVML functions: each group is looked up in the loaded library
// before any of its functions is called. go-nvml binds symbols lazily
// (RTLD_LAZY), so calling a function the installed driver lacks does not
// return an error: the dynamic linker kills the process with "undefined
// symbol". The oldest driver supported is R450 (CUDA 11.0, the first with
// A100 and MIG); every function newer than the baseline wattrace calls
// unconditionally (init, device count and handles, UUID, name, PCI info,
// power, utilization, running processes: all older than R450) is in one
// of these groups, so an older driver runs with the feature off and a
// newer one with it on.
var (
	// symEnergy: GetTotalEnergyConsumption (Volta drivers, R384 on).
	symEnergy = []string{"nvmlDeviceGetTotalEnergyConsumption"}
	// symProcUtil: per-process SM utilization samples.
	symProcUtil = []string{"nvmlDeviceGetProcessUtilization"}
	// symMIG: MIG mode and instances (R450).
	symMIG = []string{"nvmlDeviceGetMigMode", "nvmlDeviceGetGpuInstanceProfileInfo", "nvmlDeviceGetGpuInstances",
		"nvmlGpuInstanceGetInfo", "nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex",
		"nvmlDeviceGetGpuInstanceId"}
	// symGPM: GPU performance monitoring (R520, Hopper and newer boards).
	symGPM = []string{"nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleFree",
		"nvmlGpmMigSampleGet", "nvmlGpmMetricsGet"}
)

// features says which optional groups the loaded library has.
type features struct {
	energy, procUtil, mig, gpm bool
	// missing names the functions not found, for the start-up line.
	missing []string
}

func lookupFeatures(lib gonvml.Interface) features {
	var f features
	has := func(syms []string) bool {
		ok := true
		for _, s := range syms {
			if err := lib.Extensions().LookupSymbol(s); err != nil {
				f.missing = append(f.missing, s)
				ok = false
			}
		}
		return ok
	}
	f.energy, f.procUtil, f.mig, f.gpm = has(symEnergy), has(symProcUtil), has(symMIG), has(symGPM)
	return f
}

// notAvailable is NVML's NVML_VALUE_NOT_AVAILABLE for a process's memory
// (unprivileged callers, some MIG setups).
const notAvailable = ^uint64(0)

// Source reads every NVML device once per interval.
type Source struct {
	lib     gonvml.Interface
	log     *zap.Logger
	rejects *reading.Rejects
	opts    Options
	devs    []*device
	list    []reading.GPUDevice
	now     time.Time
	feat    features
	// meters are every device's ever seen, by key in order of discovery:
	// they outlive a re-initialisation, so health keeps its counts.
	meters map[string]*gpu.Meter
	order  []string
	// down is why the source is down (nil while up); reason its health
	// token; the next attempt is at retryAt, backoff after the last one.
	down     error
	reason   string
	retryAt  time.Time
	backoff  time.Duration
	attempts uint64
	// mu guards the devices list and the power boards' samples, which
	// the background sampler reads and adds to.
	mu            sync.Mutex
	stop, stopped chan struct{}
}

type device struct {
	h       gonvml.Device
	dev     reading.GPUDevice
	meter   *gpu.Meter
	counter bool // GetTotalEnergyConsumption works
	// probe: the energy counter failed at start for another reason than
	// NOT_SUPPORTED (a driver busy initialising), so it is asked again at
	// each read until it answers or says it is not supported.
	probe bool
	// pw integrates a board's power samples (boards without the energy
	// counter); sampleErr is why its latest sample failed.
	pw        gpu.Trapezoid
	sampleErr error
	maxW      float64
	seen      uint64 // last process-utilization timestamp, µs
	util      bool   // GetProcessUtilization supported
	usage     map[int]float64
	pids      map[int][]gonvml.ProcessUtilizationSample
	// gpm: the board supports GPM (Hopper and newer), so MIG instances
	// are weighted by their measured SM activity; two samples per
	// instance, alternating.
	gpm     bool
	samples map[int]*gpmPair
	// migReason says why the board's MIG instances could not be listed
	// at the latest read (its energy then goes unattributed); "" when
	// they were.
	migReason string
}

type gpmPair struct {
	s    [2]gonvml.GpmSample
	cur  int
	have bool
}

// Open initialises NVML and lists its devices. Without the driver (the
// library cannot be loaded, no driver, no permission) or with Mode "off"
// it returns a nil Source and no error, having said so once at info. Any
// other NVML error (a driver/library version mismatch after an upgrade
// without a reboot, a GPU lost from the bus) degrades this source alone:
// it reports itself down with the reason and retries (New).
func Open(opts Options, log *zap.Logger) (gpu.Source, error) {
	return OpenLib(gonvml.New(), opts, log)
}

// OpenLib is Open on lib (the real library or go-nvml's mock).
func OpenLib(lib gonvml.Interface, opts Options, log *zap.Logger) (gpu.Source, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if opts.Mode == "off" {
		return nil, nil
	}
	s, err := New(lib, opts, log)
	if errors.Is(err, errNoDriver) {
		log.Info("NVIDIA GPU source off: NVML not available", zap.Error(err))
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if s.down == nil && len(s.devs) == 0 {
		log.Info("NVIDIA GPU source off: NVML lists no device")
		s.Close()
		return nil, nil
	}
	return s, nil
}

var errNoDriver = errors.New("no NVIDIA driver")

// Retry schedule of a degraded source: the first retry at its next read,
// then after 5 s, doubling to 5 min.
const (
	retryFirst = 5 * time.Second
	retryMax   = 5 * time.Minute
)

// nvmlError is an NVML call's failure, with the reason token health
// reports for it.
type nvmlError struct {
	call string
	ret  gonvml.Return
}

func (e *nvmlError) Error() string { return "nvml " + e.call + ": " + e.ret.Error() }

// reason is a fixed token for health (bounded: the label of
// wattrace_source_degraded).
func (e *nvmlError) reason() string {
	switch e.ret {
	case gonvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return "nvml_driver_library_mismatch"
	case gonvml.ERROR_GPU_IS_LOST:
		return "nvml_gpu_lost"
	case gonvml.ERROR_UNINITIALIZED, gonvml.ERROR_DRIVER_NOT_LOADED, gonvml.ERROR_LIBRARY_NOT_FOUND:
		return "nvml_driver_not_loaded"
	case gonvml.ERROR_NO_PERMISSION:
		return "nvml_no_permission"
	case gonvml.ERROR_UNKNOWN:
		return "nvml_unknown_error"
	}
	return "nvml_error"
}

// New opens the source on lib (the real library or go-nvml's mock). It
// fails only when there is no driver to talk to (errNoDriver). Any other
// NVML error at init or device count gives a source that is down: its
// health says why (Up false, Reason), it has no readings, and each Read
// past the retry time initialises NVML again, so the GPUs come back
// without a restart once the node is fixed. The exporter's CPU and node
// energy never depend on it.
func New(lib gonvml.Interface, opts Options, log *zap.Logger) (*Source, error) {
	if log == nil {
		log = zap.NewNop()
	}
	s := &Source{lib: lib, log: log, opts: opts, rejects: reading.NewRejects("nvml", log), meters: map[string]*gpu.Meter{}}
	err := s.start()
	if errors.Is(err, errNoDriver) {
		return nil, err
	}
	if opts.SampleEvery > 0 {
		s.stop, s.stopped = make(chan struct{}), make(chan struct{})
		go s.sampler(opts.SampleEvery)
	}
	switch {
	case err != nil:
		s.degrade(err, time.Time{})
		log.Warn("NVIDIA GPU source down, retrying in the background; CPU and node energy are unaffected", zap.Error(err))
	default:
		log.Info("NVIDIA GPU source on", zap.Int("devices", len(s.devs)))
	}
	return s, nil
}

// start initialises NVML and lists its devices. A device seen before
// (by UUID) keeps its meter, restarted: its counter restarted with the
// driver.
func (s *Source) start() error {
	lib := s.lib
	switch ret := lib.Init(); ret {
	case gonvml.SUCCESS:
	case gonvml.ERROR_LIBRARY_NOT_FOUND, gonvml.ERROR_DRIVER_NOT_LOADED, gonvml.ERROR_NO_PERMISSION:
		return fmt.Errorf("%w: %w", errNoDriver, &nvmlError{"init", ret})
	default:
		return &nvmlError{"init", ret}
	}
	n, ret := lib.DeviceGetCount()
	if ret != gonvml.SUCCESS {
		lib.Shutdown()
		return &nvmlError{"device count", ret}
	}
	s.feat = lookupFeatures(lib)
	if len(s.feat.missing) > 0 {
		s.log.Info("NVML functions this driver lacks are not called; their features are off",
			zap.Strings("missing", s.feat.missing))
	}
	s.freeSamples()
	var devs []*device
	var list []reading.GPUDevice
	defer func() {
		s.mu.Lock()
		s.devs, s.list = devs, list
		s.mu.Unlock()
	}()
	for i := 0; i < n; i++ {
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			s.log.Warn("NVML device skipped", zap.Int("index", i), zap.String("error", ret.Error()))
			continue
		}
		d := &device{h: h, util: s.feat.procUtil, usage: map[int]float64{}, pids: map[int][]gonvml.ProcessUtilizationSample{},
			maxW: s.opts.MaxWatts}
		if d.maxW <= 0 {
			d.maxW = gpu.DefaultMaxWatts
		}
		d.dev = reading.GPUDevice{Index: i, Vendor: reading.VendorNVIDIA, Source: "nvml"}
		d.dev.UUID, _ = h.GetUUID()
		d.dev.Model, _ = h.GetName()
		if p, ret := h.GetPciInfo(); ret == gonvml.SUCCESS {
			d.dev.PCIBusID = pciAddr(p)
		}
		// Volta and newer have the energy counter; older boards only power.
		if s.feat.energy {
			_, ret = h.GetTotalEnergyConsumption()
			d.counter = ret == gonvml.SUCCESS
			d.probe = ret != gonvml.SUCCESS && ret != gonvml.ERROR_NOT_SUPPORTED
		}
		if m := s.meters[d.dev.Key()]; m != nil {
			m.Restart()
			d.meter = m
		} else {
			d.meter = gpu.NewMeter("nvml/"+d.dev.Key(), s.opts.MaxWatts, s.rejects)
			s.meters[d.dev.Key()] = d.meter
			s.order = append(s.order, d.dev.Key())
		}
		if s.feat.gpm {
			if sup, ret := h.GpmQueryDeviceSupport(); ret == gonvml.SUCCESS && sup.IsSupportedDevice != 0 {
				d.gpm, d.samples = true, map[int]*gpmPair{}
			}
		}
		devs = append(devs, d)
		list = append(list, d.dev)
	}
	return nil
}

// freeSamples frees the devices' GPM samples (the library allocated
// them): before NVML shuts down, and before a re-initialisation replaces
// the devices, which would otherwise leak every sample at each driver
// reload.
func (s *Source) freeSamples() {
	for _, d := range s.devs {
		for id, p := range d.samples {
			for _, smp := range p.s {
				if smp != nil {
					smp.Free()
				}
			}
			delete(d.samples, id)
		}
	}
}

// degrade marks the source down for err and schedules the next attempt.
func (s *Source) degrade(err error, now time.Time) {
	s.down = err
	s.reason = "nvml_error"
	var ne *nvmlError
	if errors.As(err, &ne) {
		s.reason = ne.reason()
	}
	switch {
	case now.IsZero():
		s.backoff = 0
	case s.backoff == 0:
		s.backoff = retryFirst
	default:
		s.backoff = min(2*s.backoff, retryMax)
	}
	s.retryAt = now.Add(s.backoff)
	s.mu.Lock()
	s.devs, s.list = nil, nil
	s.mu.Unlock()
}

// Down reports why the source is down, nil while it is up.
func (s *Source) Down() error { return s.down }

func pciAddr(p gonvml.PciInfo) string {
	b := make([]byte, 0, len(p.BusId))
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	if len(b) > 0 {
		return gpu.NormPCI(string(b))
	}
	if p.Domain == 0 && p.Bus == 0 && p.Device == 0 {
		return ""
	}
	return fmt.Sprintf("%04x:%02x:%02x.0", p.Domain, p.Bus, p.Device)
}

func (s *Source) Name() string                 { return "nvml" }
func (s *Source) Devices() []reading.GPUDevice { return slices.Clone(s.list) }

// Close stops the sampler, frees the GPM samples and shuts NVML down.
func (s *Source) Close() error {
	if s.stop != nil {
		close(s.stop)
		<-s.stopped
		s.stop = nil
	}
	s.freeSamples()
	s.lib.Shutdown()
	return nil
}
func (s *Source) Rejects() *reading.Rejects { return s.rejects }

// Health reports one entry per device ever seen; while the source is
// down every one is down with the reason, and before any device was seen
// one entry "nvml" says so.
func (s *Source) Health() []reading.SourceHealth {
	out := make([]reading.SourceHealth, 0, len(s.order))
	rej := s.rejects.Counts()
	for _, k := range s.order {
		h := s.meters[k].Health(s.now)
		h.Rejected = rej
		for _, d := range s.devs {
			if d.dev.Key() == k && d.migReason != "" && h.Reason == "" {
				h.Reason = d.migReason
			}
		}
		if s.down != nil {
			h.Up, h.Reason = false, s.reason
		}
		out = append(out, h)
	}
	if len(out) == 0 && s.down != nil {
		out = append(out, reading.SourceHealth{Source: "nvml", Reads: s.attempts, Errors: s.attempts, Reason: s.reason, Rejected: rej})
	}
	return out
}

// Read returns every device's reading for the interval ending at now.
// The per-process maps in the readings are reused by the next Read.
// While the source is down it returns no readings and, at the retry
// time, initialises NVML again. When every device fails at once (the
// driver was unloaded or reloaded under us), the source goes down and
// re-initialises at the next read.
//
// A device not reached before ctx is done (the stats loop's step deadline)
// is not read: its reading is not OK, its meter counts the read late, and
// its next reading spans the gap.
func (s *Source) Read(ctx context.Context, now time.Time) ([]reading.GPUReading, error) {
	s.now = now
	if s.down != nil {
		if now.Before(s.retryAt) {
			return nil, s.down
		}
		s.attempts++
		if err := s.start(); err != nil {
			s.degrade(err, now)
			return nil, err
		}
		s.down, s.backoff = nil, 0
		s.log.Info("NVIDIA GPU source up again", zap.Int("devices", len(s.devs)))
	}
	out := make([]reading.GPUReading, 0, len(s.devs))
	var failed int
	var last gonvml.Return
	for _, d := range s.devs {
		if err := ctx.Err(); err != nil {
			d.meter.Fail(fmt.Errorf("not read before the deadline: %w", err), now)
			m := reading.MethodCounter
			if !d.counter {
				m = reading.MethodPowerIntegrated
			}
			out = append(out, reading.GPUReading{Device: d.dev, Method: m, Interval: d.meter.Interval(), UsageUnknown: true})
			continue
		}
		r, ret := s.read(d, now)
		if ret != gonvml.SUCCESS && ret != gonvml.ERROR_NOT_SUPPORTED {
			failed, last = failed+1, ret
		}
		out = append(out, r)
	}
	if failed > 0 && failed == len(s.devs) {
		err := &nvmlError{"energy", last}
		s.freeSamples()
		s.lib.Shutdown()
		s.degrade(err, time.Time{})
		s.retryAt = now // re-initialise at the next read
		s.log.Warn("every NVIDIA GPU failed; re-initialising NVML", zap.Error(err))
		return out, err
	}
	return out, nil
}

// read reads one device; ret is its energy or power call's result.
func (s *Source) read(d *device, now time.Time) (reading.GPUReading, gonvml.Return) {
	var eret gonvml.Return
	r := reading.GPUReading{Device: d.dev, Method: reading.MethodCounter}
	if d.counter {
		mj, ret := d.h.GetTotalEnergyConsumption()
		eret = ret
		if ret != gonvml.SUCCESS {
			d.meter.Fail(fmt.Errorf("energy: %s", ret.Error()), now)
		} else {
			r.EnergyJ, r.OK = d.meter.Counter(float64(mj)/1e3, now)
		}
	} else {
		// The power sampled within the interval (in the background) and
		// at its end (now), integrated with the trapezoid rule, through
		// the meter's counter validation as any energy counter.
		r.Method = reading.MethodPowerIntegrated
		eret = s.samplePower(d, now)
		s.mu.Lock()
		j, at := d.pw.Integrate(now)
		serr := d.sampleErr
		s.mu.Unlock()
		r.EnergyJ, r.OK = d.meter.Integrated(j, at, serr, now)
	}
	r.Interval, r.PowerW = d.meter.Interval(), d.meter.PowerW()
	if d.probe {
		s.probeEnergy(d, now)
	}
	if u, ret := d.h.GetUtilizationRates(); ret == gonvml.SUCCESS {
		if err := reading.CheckGauge(float64(u.Gpu), 100); err == nil {
			r.Utilization, r.UtilizationKnown = float64(u.Gpu)/100, true
		} else {
			s.rejects.Add(err, d.dev.Key()+" utilization")
		}
	}
	if s.migEnabled(d) {
		r.Instances, r.UsageUnknown = s.instances(d)
		return r, eret
	}
	clear(d.usage)
	r.Usage = d.usage
	if d.util {
		if supported, read := s.processUtil(d, r.Interval); supported {
			r.Basis, r.UsageUnknown = reading.BasisSMUtil, !read
			return r, eret
		}
		d.util = false
		s.log.Info("per-process GPU utilization unsupported, splitting by memory held",
			zap.String("gpu", d.dev.Key()))
	}
	r.Basis = reading.BasisMemory
	procs, ret := d.h.GetComputeRunningProcesses()
	if ret != gonvml.SUCCESS {
		r.UsageUnknown = true
		return r, eret
	}
	memoryWeights(procs, func(p gonvml.ProcessInfo, w float64) { d.usage[int(p.Pid)] += w })
	return r, eret
}

// samplePower samples a power board once at now; ret is NVML's answer.
func (s *Source) samplePower(d *device, now time.Time) gonvml.Return {
	mw, ret := d.h.GetPowerUsage()
	s.mu.Lock()
	defer s.mu.Unlock()
	if ret != gonvml.SUCCESS {
		d.sampleErr = fmt.Errorf("power: %s", ret.Error())
		return ret
	}
	w := float64(mw) / 1e3
	if err := reading.CheckGauge(w, d.maxW); err != nil {
		s.rejects.Add(err, d.dev.Key()+" power")
		d.sampleErr = err
		return ret
	}
	d.sampleErr = nil
	d.pw.Add(now, w)
	return ret
}

// sampler samples the power boards every interval until Close.
func (s *Source) sampler(every time.Duration) {
	defer close(s.stopped)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			var power []*device
			s.mu.Lock()
			for _, d := range s.devs {
				if !d.counter {
					power = append(power, d)
				}
			}
			s.mu.Unlock()
			for _, d := range power {
				s.samplePower(d, now)
			}
		}
	}
}

// probeEnergy asks again for the energy counter a start-up error denied.
// Once it answers, this interval's energy stays the power integration's
// and the counter's reading is the baseline of the next: the meter
// restarts on the counter, so no interval mixes the two.
func (s *Source) probeEnergy(d *device, now time.Time) {
	mj, ret := d.h.GetTotalEnergyConsumption()
	switch ret {
	case gonvml.SUCCESS:
		s.mu.Lock()
		d.counter, d.probe = true, false
		d.pw.Reset()
		s.mu.Unlock()
		d.meter.Restart()
		d.meter.Counter(float64(mj)/1e3, now)
		s.log.Info("NVIDIA GPU energy counter answers now; energy is read from it", zap.String("gpu", d.dev.Key()))
	case gonvml.ERROR_NOT_SUPPORTED:
		d.probe = false
	}
}

// processUtil fills d.usage with each pid's SM utilization × time from the
// samples NVML took since the last one seen. supported is false when the
// device does not support per-process utilization; read is false when the
// call failed otherwise, so d.usage says nothing of who used the device.
//
// Each sample stands for the time since that pid's previous sample (or
// since the last timestamp seen for its first one in this interval), so
// a process sampled more often is not counted more. A process holding a
// context but never sampled busy gets no share.
func (s *Source) processUtil(d *device, interval time.Duration) (supported, read bool) {
	samples, ret := d.h.GetProcessUtilization(d.seen)
	switch ret {
	case gonvml.SUCCESS:
	case gonvml.ERROR_NOT_FOUND: // no sample since d.seen
		return true, true
	case gonvml.ERROR_NOT_SUPPORTED:
		return false, false
	default:
		s.rejects.Add(reading.Reject(reading.Unreadable, 0, "%s", ret.Error()), d.dev.Key()+" process utilization")
		return true, false
	}
	for k, v := range d.pids {
		d.pids[k] = v[:0]
	}
	newest := d.seen
	for _, smp := range samples {
		if smp.TimeStamp <= d.seen {
			continue // NVML may hand back the boundary sample
		}
		if err := reading.CheckGauge(float64(smp.SmUtil), 100); err != nil {
			s.rejects.Add(err, d.dev.Key()+" process sm utilization")
			continue
		}
		d.pids[int(smp.Pid)] = append(d.pids[int(smp.Pid)], smp)
		newest = max(newest, smp.TimeStamp)
	}
	for pid, ss := range d.pids {
		if len(ss) == 0 {
			delete(d.pids, pid)
			continue
		}
		slices.SortFunc(ss, func(a, b gonvml.ProcessUtilizationSample) int {
			return cmpU64(a.TimeStamp, b.TimeStamp)
		})
		prev := d.seen
		var w float64
		for i, smp := range ss {
			dt := float64(smp.TimeStamp - prev)
			if i == 0 && (prev == 0 || dt > 2*float64(interval.Microseconds())) {
				// No earlier timestamp to measure from (first interval, or
				// the pid is new after a long quiet spell): count one
				// sampling period, the next gap, or the interval.
				dt = float64(interval.Microseconds())
				if len(ss) > 1 {
					dt = float64(ss[1].TimeStamp - ss[0].TimeStamp)
				}
				if dt <= 0 {
					dt = 1
				}
			}
			w += float64(smp.SmUtil) * dt
			prev = smp.TimeStamp
		}
		if w > 0 {
			d.usage[pid] = w
		}
	}
	d.seen = newest
	return true, true
}

// migEnabled reports whether the board runs in MIG mode; false where the
// driver has no MIG functions.
func (s *Source) migEnabled(d *device) bool {
	if !s.feat.mig {
		return false
	}
	cur, _, ret := d.h.GetMigMode()
	return ret == gonvml.SUCCESS && cur == gonvml.DEVICE_MIG_ENABLE
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// memoryWeights calls add with each process's weight by memory held. When
// no process's memory is known (NVML_VALUE_NOT_AVAILABLE) each holder gets
// an even weight rather than nothing.
func memoryWeights(procs []gonvml.ProcessInfo, add func(gonvml.ProcessInfo, float64)) {
	known := false
	for _, p := range procs {
		if p.UsedGpuMemory != notAvailable && p.UsedGpuMemory > 0 {
			known = true
			break
		}
	}
	for _, p := range procs {
		switch {
		case !known:
			add(p, 1)
		case p.UsedGpuMemory != notAvailable:
			add(p, float64(p.UsedGpuMemory))
		}
	}
}

// instances lists the board's MIG GPU instances with their processes;
// unknown is true when the processes could not be listed.
// NVML has no per-instance energy, and per-process utilization is not
// supported under MIG. An instance is weighted by its SMs × its GPM SM
// activity over the interval where the board has GPM (Hopper and newer),
// else by its SMs while it runs processes; its processes by the memory
// they hold.
func (s *Source) instances(d *device) (_ []reading.GPUInstance, unknown bool) {
	var out []reading.GPUInstance
	d.migReason = ""
	failed := func(what string, ret gonvml.Return) {
		// A profile the board does not offer is no failure; anything
		// else leaves instances out, so their energy would be
		// unattributed without a word.
		if ret == gonvml.ERROR_NOT_SUPPORTED || ret == gonvml.ERROR_INVALID_ARGUMENT || ret == gonvml.ERROR_NOT_FOUND {
			return
		}
		if d.migReason == "" {
			d.migReason = "mig_instances_unlisted"
			s.rejects.Add(reading.Reject(reading.Unreadable, 0, "%s: %s", what, ret.Error()), d.dev.Key()+" mig instances")
		}
	}
	for p := 0; p < gonvml.GPU_INSTANCE_PROFILE_COUNT; p++ {
		info, ret := d.h.GetGpuInstanceProfileInfo(p)
		if ret != gonvml.SUCCESS {
			failed("GPU instance profile", ret)
			continue
		}
		gis, ret := d.h.GetGpuInstances(&info)
		if ret != gonvml.SUCCESS {
			failed("GPU instances", ret)
			continue
		}
		for _, gi := range gis {
			gii, ret := gi.GetInfo()
			if ret != gonvml.SUCCESS {
				failed("GPU instance info", ret)
				continue
			}
			out = append(out, reading.GPUInstance{
				ID:          int(gii.Id),
				Name:        fmt.Sprintf("%d.%d", d.dev.Index, gii.Id),
				SMs:         int(info.MultiprocessorCount),
				WeightBasis: "sm_share",
				Basis:       reading.BasisMemory,
				Usage:       map[int]float64{},
			})
		}
	}
	slices.SortFunc(out, func(a, b reading.GPUInstance) int { return a.ID - b.ID })
	// The MIG devices' UUIDs (MIG-…) are how the Kubernetes device plugin
	// and CUDA_VISIBLE_DEVICES name an instance.
	if n, ret := d.h.GetMaxMigDeviceCount(); ret == gonvml.SUCCESS {
		for i := 0; i < n; i++ {
			mh, ret := d.h.GetMigDeviceHandleByIndex(i)
			if ret != gonvml.SUCCESS {
				continue
			}
			gi, ret1 := mh.GetGpuInstanceId()
			uuid, ret2 := mh.GetUUID()
			if ret1 != gonvml.SUCCESS || ret2 != gonvml.SUCCESS {
				continue
			}
			for j := range out {
				if out[j].ID == gi {
					out[j].UUID = uuid
				}
			}
		}
	}
	procs, ret := d.h.GetComputeRunningProcesses()
	if ret != gonvml.SUCCESS || d.migReason != "" {
		return out, true
	}
	byGI := map[uint32][]gonvml.ProcessInfo{}
	for _, p := range procs {
		byGI[p.GpuInstanceId] = append(byGI[p.GpuInstanceId], p)
	}
	for i := range out {
		in := &out[i]
		ps := byGI[uint32(in.ID)]
		memoryWeights(ps, func(p gonvml.ProcessInfo, w float64) { in.Usage[int(p.Pid)] += w })
		if len(in.Usage) > 0 {
			in.Weight = float64(in.SMs)
		}
	}
	if d.gpm {
		s.gpmWeights(d, out)
	}
	return out, false
}

// gpmWeights replaces the SM-share weights by SMs × measured SM activity
// when every instance's activity could be measured this interval; a mix
// of bases would not be comparable, so any failure keeps the SM shares.
func (s *Source) gpmWeights(d *device, ins []reading.GPUInstance) {
	util := make([]float64, len(ins))
	all := true
	live := make(map[int]bool, len(ins))
	for i, in := range ins {
		live[in.ID] = true
		p := d.samples[in.ID]
		if p == nil {
			p = &gpmPair{}
			for j := range p.s {
				smp, ret := s.lib.GpmSampleAlloc()
				if ret != gonvml.SUCCESS {
					d.gpm = false
					return
				}
				p.s[j] = smp
			}
			d.samples[in.ID] = p
		}
		cur, prev := p.s[p.cur], p.s[1-p.cur]
		if ret := d.h.GpmMigSampleGet(in.ID, cur); ret != gonvml.SUCCESS {
			p.have, all = false, false
			continue
		}
		had := p.have
		p.have, p.cur = true, 1-p.cur
		if !had {
			all = false
			continue
		}
		mg := &gonvml.GpmMetricsGetType{Version: gonvml.GPM_METRICS_GET_VERSION, NumMetrics: 1, Sample1: prev, Sample2: cur}
		mg.Metrics[0].MetricId = uint32(gonvml.GPM_METRIC_SM_UTIL)
		if ret := s.lib.GpmMetricsGet(mg); ret != gonvml.SUCCESS || mg.Metrics[0].NvmlReturn != uint32(gonvml.SUCCESS) {
			all = false
			continue
		}
		v := mg.Metrics[0].Value
		if err := reading.CheckGauge(v, 100); err != nil {
			s.rejects.Add(err, d.dev.Key()+" gpm sm utilization")
			all = false
			continue
		}
		util[i] = v
	}
	for id, p := range d.samples {
		if !live[id] { // instance destroyed
			for _, smp := range p.s {
				smp.Free()
			}
			delete(d.samples, id)
		}
	}
	if !all {
		return
	}
	for i := range ins {
		ins[i].Weight = float64(ins[i].SMs) * util[i] / 100
		ins[i].WeightBasis = "gpm_sm_util"
	}
}

// String helps logs.
func (s *Source) String() string {
	keys := make([]string, len(s.list))
	for i, d := range s.list {
		keys[i] = d.Key()
	}
	return "nvml[" + strings.Join(keys, ",") + "]"
}
