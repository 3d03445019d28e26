package stats

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/model"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// GPUSource is the node's GPUs; *node.GPUs implements it. Interval reads
// every device and resolves its holder; the result may be reused by the
// next call.
type GPUSource interface {
	Interval(ctx context.Context, now time.Time) *reading.GPUInterval
}

// GPUConfig is what the GPU stage needs of the gpu.* configuration.
type GPUConfig struct {
	// IdleWatts is gpu.idle-watts: configured idle power by UUID, PCI
	// address or index; other devices learn theirs at low utilization.
	IdleWatts map[string]float64
	// IdleLearnUtilization is gpu.idle-learn-utilization.
	IdleLearnUtilization float64
	// IdlePolicy is gpu.idle-policy: "none" or "holder".
	IdlePolicy string
}

// WithGPUs adds the GPU stage: each device is a zone of its own, split
// into idle (the device's idle model) and dynamic, the dynamic among the
// processes that used the device.
func WithGPUs(src GPUSource, cfg GPUConfig) Option {
	return func(o *parts) { o.gpus, o.gpuCfg = src, &cfg }
}

func (c GPUConfig) validate() error {
	for k, w := range c.IdleWatts {
		if _, err := model.NewConfiguredIdle(w); err != nil {
			return fmt.Errorf("gpu.idle-watts %s: %w", k, err)
		}
	}
	if !(c.IdleLearnUtilization >= 0 && c.IdleLearnUtilization <= 1) {
		return fmt.Errorf("gpu.idle-learn-utilization: %v is not within 0..1", c.IdleLearnUtilization)
	}
	if c.IdlePolicy != "" && c.IdlePolicy != "none" && c.IdlePolicy != "holder" {
		return fmt.Errorf("gpu.idle-policy: %q is not none or holder", c.IdlePolicy)
	}
	return nil
}

// gpuDev is one device's state across intervals.
type gpuDev struct {
	rec  snapshot.GPU
	idle model.IdleModel
	// procs are keyed by PID and start time: a reused PID is a new
	// process and starts a new record.
	procs map[reading.ProcKey]*gpuProc
	// read: the device had a reading this interval.
	read bool
	// zone is the device zone's socket: the stage's own numbering, in
	// the order devices are first read (the sources' order, as
	// node.GPUs.Devices lists them), so it never collides with another
	// source's device index; the meters number their GPU zones after it.
	zone int
	// idleS is each holder's held-idle seconds on this device (its
	// instance for a MIG holder), kept across intervals because the
	// holder records are rebuilt each one; a holder that no longer holds
	// the device is dropped, so its counter starts again from 0 if it
	// comes back (a reset, which rate() and the units updater absorb).
	idleS map[snapshot.GPUHolder]float64
}

// series is the device zone's series: its processes' and holders'
// energy carries the device's source, as its node series does.
func (d *gpuDev) series() snapshot.ZoneSeries {
	return snapshot.ZoneSeries{Zone: reading.ZoneGPU, Source: d.rec.Source}
}

// liveProc is a process the ledger saw alive this interval.
type liveProc struct {
	k reading.ProcKey
	w *consumer
}

type gpuProc struct {
	rec  snapshot.GPUProcess
	seen bool
}

func (p *gpuProc) liveness() (bool, bool, time.Time) { return p.rec.Alive, p.seen, p.rec.LastSeen }

// holderCredit is energy owed to an allocation holder's workload, paid
// after the roll-up has found the workloads of this interval.
type holderCredit struct {
	h       reading.Holder
	dyn, id float64
	// series is the device's zone series, as for its processes' energy.
	series snapshot.ZoneSeries
}

// gpuStage is the stage that turns the GPUs' readings into zones: each
// device's energy of the interval split into idle and per-process dynamic
// (splitGPU, through pkg/model), credited to the processes' consumers and
// their cgroups (so it rolls up into workloads like any zone) and, under
// the holder policy or passthrough, to the holder's workload.
type gpuStage struct {
	phases
	src GPUSource
	cfg GPUConfig
	// led finds the processes and cgroups credited; ids, when set, names
	// their workloads for the per-process records.
	led consumers
	ids WorkloadResolver
	// roll pays the holders' workloads; nil without the roll-up.
	roll workloadCredit
	// credits gives consumers their GPU joules, as for any zone.
	credits   *credits
	retention time.Duration
	interval  time.Duration
	devs      map[string]*gpuDev
	order     []string
	health    []reading.SourceHealth
	res       gpuResult
	byPID     map[uint32]liveProc
	owed      []holderCredit
}

func makeGPUs(d *deps) (stage, error) {
	if d.opts.gpus == nil {
		return nil, nil
	}
	if err := d.opts.gpuCfg.validate(); err != nil {
		return nil, err
	}
	g := newGPUStage(d.opts.gpus, *d.opts.gpuCfg, d.consumers, d.credits)
	g.ids, g.roll = d.opts.ids, d.workloads
	g.retention, g.interval = d.cfg.Retention, d.cfg.Interval
	return g, nil
}

func newGPUStage(src GPUSource, cfg GPUConfig, led consumers, cr *credits) *gpuStage {
	return &gpuStage{src: src, cfg: cfg, led: led, credits: cr, devs: map[string]*gpuDev{}, byPID: map[uint32]liveProc{}}
}

// maxGap: NVML keeps per-process utilization samples only for a while, so
// the GPUs are read every stats.interval.
func (g *gpuStage) maxGap() time.Duration { return g.interval }

func (g *gpuStage) idleModel(d reading.GPUDevice) model.IdleModel {
	// Keys compare case-insensitively: a YAML map's keys arrive
	// lower-cased, NVML's UUIDs start "GPU-".
	for _, k := range []string{d.UUID, d.PCIBusID, strconv.Itoa(d.Index)} {
		for ck, w := range g.cfg.IdleWatts {
			if k != "" && strings.EqualFold(ck, k) {
				return &model.ConfiguredIdle{Watts: w}
			}
		}
	}
	return model.NewLearnedIdle(g.cfg.IdleLearnUtilization)
}

func (g *gpuStage) absorb(iv *interval) { g.read(iv.ctx, iv.now, iv.dt) }

// read reads the GPUs for the interval ending at now, under the step's
// deadline (a device not read by then is not credited this interval; its
// source counts it late), splits each device's energy and credits the
// processes (by PID, among the ledger's live processes) and their
// cgroups. On the baseline (dt 0) it only reads, so the sources take
// their own baselines.
func (g *gpuStage) read(ctx context.Context, now time.Time, dt time.Duration) {
	iv := g.src.Interval(ctx, now)
	g.health = append(g.health[:0], iv.Health...)
	g.owed = g.owed[:0]
	g.beginInterval()
	for i := range iv.Devices {
		nd := &iv.Devices[i]
		dev := g.device(nd.Reading.Device)
		dev.takeReading(nd)
		if dt > 0 {
			g.heldIdle(dev, nd, dt)
		} else {
			dev.keepIdleSeconds()
		}
		if len(dev.rec.Holders) > 0 {
			h := dev.rec.Holders[0]
			dev.rec.Holder = &h
		}
		if dt > 0 {
			g.splitDevice(dev, nd, now)
		}
	}
	g.endInterval()
}

// beginInterval indexes the ledger's live processes by PID and marks
// every device unread and every device's processes unseen, until this
// interval's readings say otherwise.
func (g *gpuStage) beginInterval() {
	clear(g.byPID)
	for k, w := range g.led.processes() {
		if w.seen && w.w.Alive {
			g.byPID[w.w.PID] = liveProc{k, w}
		}
	}
	for _, d := range g.devs {
		for _, p := range d.procs {
			p.seen = false
		}
		d.read = false
	}
}

// takeReading records a device's reading of this interval: its power
// (NaN when the reading failed or was rejected, rather than its last good
// figure), utilization (NaN when unknown), method (kept from the last good
// reading) and holders, whole-device and per MIG instance, whose idle
// ratios heldIdle sets next.
func (dev *gpuDev) takeReading(nd *reading.HeldGPUReading) {
	r := &nd.Reading
	dev.read = true
	if !r.OK {
		dev.rec.PowerW = math.NaN()
	}
	dev.rec.Utilization = r.Utilization
	if !r.UtilizationKnown {
		dev.rec.Utilization = math.NaN()
	}
	if r.OK {
		dev.rec.Method = string(r.Method)
	}
	dev.rec.Holder, dev.rec.Holders = nil, dev.rec.Holders[:0]
	for _, h := range nd.Holders {
		hr := holderRecord(h, "")
		hr.Whole = nd.Whole
		dev.rec.Holders = append(dev.rec.Holders, hr)
	}
	dev.rec.InstanceHolders = dev.rec.InstanceHolders[:0]
	for _, in := range r.Instances {
		for _, h := range nd.InstanceHolders[in.Name] {
			dev.rec.InstanceHolders = append(dev.rec.InstanceHolders, holderRecord(h, in.Name))
		}
	}
}

// splitDevice splits a device's energy of the interval into idle and
// per-process dynamic (splitGPU), credits each process and its cgroup,
// records what the holders are owed (payOwed) and adds the interval to
// the device's record. A failed or rejected reading adds and credits
// nothing.
func (g *gpuStage) splitDevice(dev *gpuDev, nd *reading.HeldGPUReading, now time.Time) {
	r := nd.Reading
	opt := gpuOptions{Whole: nd.HasHolder && nd.Whole, IdleToHolder: nd.HasHolder && g.cfg.IdlePolicy == "holder"}
	splitGPU(r, dev.idle, opt, &g.res)
	if !r.OK {
		return
	}
	if g.res.Basis != reading.BasisNone {
		// Keep the last basis through intervals without one, so the
		// per-process series' basis label does not churn.
		dev.rec.Basis = string(g.res.Basis)
	}
	unattributed := g.res.UnattributedJ
	for pid, j := range g.res.Processes {
		if !g.creditProcess(dev, uint32(pid), j, now) {
			// A process the accounting does not know (another PID
			// namespace, gone between the reads): its share stays at
			// device level, never guessed onto someone else.
			unattributed += j
		}
	}
	g.payOwed(nd, r, opt, dev.series())
	dev.rec.EnergyJ += g.res.EnergyJ
	dev.rec.IdleJ += g.res.IdleJ
	dev.rec.DynamicJ += g.res.DynamicJ
	dev.rec.UnattributedJ += unattributed
	dev.rec.HolderJ += g.res.HolderJ
	dev.rec.PowerW = r.PowerW
	if g.res.Clamped {
		dev.rec.IdleClamps++
	}
}

// creditProcess credits j joules of a device's dynamic energy to the live
// process pid and its cgroup, and adds them to the device's record of the
// process (named for its workload when the loop resolves workloads). It
// says false, crediting nothing, when the ledger has no live process pid.
func (g *gpuStage) creditProcess(dev *gpuDev, pid uint32, j float64, now time.Time) bool {
	lp, ok := g.byPID[pid]
	if !ok {
		return false
	}
	w := lp.w
	g.credits.consumer(w, dev.series(), j, 0)
	if cg := g.led.cgroup(w.w.CgroupID); cg != nil {
		g.credits.consumer(cg, dev.series(), j, 0)
	}
	p := dev.procs[lp.k]
	if p == nil {
		p = &gpuProc{rec: snapshot.GPUProcess{PID: pid}}
		dev.procs[lp.k] = p
	}
	p.rec.DynamicJ += j
	if p.rec.Cgroup != w.w.Cgroup && g.ids != nil {
		id := g.ids.Resolve(w.w.Cgroup)
		p.rec.Namespace, p.rec.Pod, p.rec.Container, p.rec.JobID, p.rec.VM = id.Namespace, id.Pod, id.Container, id.JobID, id.VMName
	}
	p.rec.Comm, p.rec.Cgroup, p.rec.Alive, p.rec.LastSeen, p.seen = w.w.Comm, w.w.Cgroup, true, now, true
	return true
}

// endInterval blanks the devices not read this interval and marks each
// device's process that was not credited alive only while the ledger
// still sees it (the same process: a reused PID is another).
func (g *gpuStage) endInterval() {
	for _, d := range g.devs {
		if !d.read {
			d.blank()
		}
		for k, p := range d.procs {
			if !p.seen {
				lp, ok := g.byPID[k.PID]
				p.rec.Alive = p.rec.Alive && ok && lp.k == k
			}
		}
	}
}

// blank is a device whose source is down: no power, no utilization, no
// telling whether its holders use it, until it is read again.
func (dev *gpuDev) blank() {
	dev.rec.PowerW, dev.rec.Utilization = math.NaN(), math.NaN()
	for i := range dev.rec.Holders {
		dev.rec.Holders[i].IdleRatio = math.NaN()
	}
	for i := range dev.rec.InstanceHolders {
		dev.rec.InstanceHolders[i].IdleRatio = math.NaN()
	}
	if dev.rec.Holder != nil {
		dev.rec.Holder.IdleRatio = math.NaN()
	}
}

// payOwed records what the device's holders are owed for this interval,
// paid after the roll-up (payHolders). Several holders of one device
// (time-slicing replicas, MPS, Slurm shards, vGPU mdevs) share evenly, in
// the holders' sorted order, so who carries the idle never depends on
// listing order. On a MIG board without a holder of the whole board, the
// idle energy under the holder policy is divided among the instances by
// their SMs, and each held instance's part is paid to its holders; the
// parts of unheld instances stay at device level. g.res.HolderJ is set
// to what is owed.
func (g *gpuStage) payOwed(nd *reading.HeldGPUReading, r reading.GPUReading, opt gpuOptions, zs snapshot.ZoneSeries) {
	switch n := float64(len(nd.Holders)); {
	case g.res.HolderJ > 0 && opt.Whole:
		for _, h := range nd.Holders {
			g.owed = append(g.owed, holderCredit{h: h, dyn: g.res.DynamicJ / n, id: g.res.IdleJ / n, series: zs})
		}
	case g.res.HolderJ > 0:
		for _, h := range nd.Holders {
			g.owed = append(g.owed, holderCredit{h: h, id: g.res.HolderJ / n, series: zs})
		}
	case !nd.HasHolder && g.cfg.IdlePolicy == "holder" && len(r.Instances) > 0 && g.res.IdleJ > 0:
		var sms float64
		for _, in := range r.Instances {
			sms += float64(in.SMs)
		}
		if sms <= 0 {
			return
		}
		for _, in := range r.Instances {
			hs := nd.InstanceHolders[in.Name]
			if len(hs) == 0 {
				continue
			}
			part := g.res.IdleJ * float64(in.SMs) / sms
			g.res.HolderJ += part
			for _, h := range hs {
				g.owed = append(g.owed, holderCredit{h: h, id: part / float64(len(hs)), series: zs})
			}
		}
	}
}

func (g *gpuStage) device(d reading.GPUDevice) *gpuDev {
	dev := g.devs[d.Key()]
	if dev == nil {
		dev = &gpuDev{idle: g.idleModel(d), procs: map[reading.ProcKey]*gpuProc{}, zone: len(g.devs)}
		dev.rec = snapshot.GPU{Index: d.Index, UUID: d.Key(), Model: d.Model, PCIBusID: d.PCIBusID,
			Vendor: string(d.Vendor), Source: d.Source}
		g.devs[d.Key()] = dev
		g.order = append(g.order, d.Key())
		sort.SliceStable(g.order, func(i, j int) bool { return g.devs[g.order[i]].rec.Index < g.devs[g.order[j]].rec.Index })
	}
	return dev
}

// settle pays what the holders are owed to their workloads at the level
// the holder names (job, pod, vm), once the roll-up has found this
// interval's workloads, through credits (so the joules are priced as the
// device's zone was). A holder without a matching workload (its cgroups
// not seen yet, or the level off) keeps its part at device level
// (snapshot.GPU.HolderJ).
func (g *gpuStage) settle(*interval) {
	if g.roll == nil {
		return
	}
	defer func() { g.owed = g.owed[:0] }()
	for _, c := range g.owed {
		level, match := holderMatch(c.h)
		if level == "" {
			continue
		}
		g.roll.credit(level, match, c.series, c.dyn, c.id)
	}
}

// holderRecord publishes a holder. Its IdleRatio is NaN until heldIdle
// tells; a VM's stays so, and it is not IdleObservable: the host does not
// see the guest's processes, so an idle figure would be a guess.
func holderRecord(h reading.Holder, instance string) snapshot.GPUHolder {
	return snapshot.GPUHolder{Kind: string(h.Kind), JobID: h.JobID, Namespace: h.Namespace, Pod: h.Pod,
		Container: h.Container, VM: h.VMName, VMUUID: h.VMUUID, Instance: instance,
		IdleObservable: h.Kind != reading.HolderVM, IdleRatio: math.NaN()}
}

// heldIdle sets, for one device's interval, each observable holder's
// IdleRatio: 1 when none of the holder's processes used the device (or,
// for an instance's holder, that MIG instance), 0 when one did. "Used"
// is a positive weight in the interval's usage: SM time sampled busy
// (sm_util), engine busy time (engine_time, engine_time_kfd), or, where
// the source has no activity per process (basis memory: MIG, boards
// without per-process utilization), memory held, which cannot tell a
// resident process from a busy one. A MIG instance GPM measured at zero
// activity was not used, whoever is resident in it. A process holding a
// context but never sampled busy did not use it: a GPU kept by a process
// doing nothing is as wasted as one without any.
//
// A process counts as the holder's unless the loop knows it belongs to
// another workload (mayBeHolders): a process whose workload is unknown
// (the ledger does not see it, no workload resolution, a cgroup of no
// job, pod or VM) might be the holder's, and an idle figure must never
// be claimed on a guess. When the source could not read the usage
// (UsageUnknown) the ratio is NaN.
//
// Each idle interval adds its exact length dt to the holder's IdleSeconds,
// so the counter is the ratio summed over intervals in seconds, whatever
// the scrape interval; a NaN interval adds nothing.
func (g *gpuStage) heldIdle(dev *gpuDev, nd *reading.HeldGPUReading, dt time.Duration) {
	r := &nd.Reading
	ratio := func(h *snapshot.GPUHolder) {
		if !h.IdleObservable {
			return
		}
		h.IdleRatio = math.NaN()
		if r.UsageUnknown {
			return
		}
		used := func(usage map[int]float64) bool {
			for pid, w := range usage {
				if w > 0 && g.mayBeHolders(h, pid) {
					return true
				}
			}
			return false
		}
		busy := false
		if len(r.Instances) == 0 {
			busy = used(r.Usage)
		}
		for _, in := range r.Instances {
			if h.Instance != "" && in.Name != h.Instance {
				continue
			}
			if in.WeightBasis == "gpm_sm_util" && in.Weight <= 0 {
				continue
			}
			if used(in.Usage) {
				busy = true
				break
			}
		}
		h.IdleRatio = 1
		if busy {
			h.IdleRatio = 0
		}
	}
	prev := dev.idleS
	dev.idleS = make(map[snapshot.GPUHolder]float64, len(dev.rec.Holders)+len(dev.rec.InstanceHolders))
	count := func(h *snapshot.GPUHolder) {
		ratio(h)
		if !h.IdleObservable {
			return
		}
		k := holderKey(h)
		s := prev[k]
		if h.IdleRatio == 1 {
			s += dt.Seconds()
		}
		h.IdleSeconds = s
		dev.idleS[k] = s
	}
	for i := range dev.rec.Holders {
		count(&dev.rec.Holders[i])
	}
	for i := range dev.rec.InstanceHolders {
		count(&dev.rec.InstanceHolders[i])
	}
}

// keepIdleSeconds shows the holders' counters as they stand, for an
// interval that does not tell idleness.
func (dev *gpuDev) keepIdleSeconds() {
	for i := range dev.rec.Holders {
		dev.rec.Holders[i].IdleSeconds = dev.idleS[holderKey(&dev.rec.Holders[i])]
	}
	for i := range dev.rec.InstanceHolders {
		dev.rec.InstanceHolders[i].IdleSeconds = dev.idleS[holderKey(&dev.rec.InstanceHolders[i])]
	}
}

// holderKey is a holder's identity for its held-idle counter: the
// figures zeroed, so only who holds what is compared.
func holderKey(h *snapshot.GPUHolder) snapshot.GPUHolder {
	k := *h
	k.IdleRatio, k.IdleSeconds = 0, 0
	return k
}

// mayBeHolders says whether pid may be one of h's processes: false only
// when the loop knows it belongs to another workload, one of h's level
// with other labels (another job, another pod) or one of another
// holder's level (a pod's process is no Slurm job's). A label the
// resolver has not learnt yet (a pod's name) proves nothing.
func (g *gpuStage) mayBeHolders(h *snapshot.GPUHolder, pid int) bool {
	lp, ok := g.byPID[uint32(pid)]
	if !ok || g.ids == nil {
		return true
	}
	level, match := ident.HolderMatch(heldBy(h))
	if level == "" {
		return true
	}
	id := g.ids.Resolve(lp.w.w.Cgroup)
	if vals, member := id.LabelValues(level); member {
		for i, name := range ident.LabelNames(level) {
			if want, ok := match[name]; ok && i < len(vals) && vals[i] != "" && vals[i] != want {
				return false
			}
		}
		return true
	}
	for _, k := range []reading.HolderKind{reading.HolderSlurmJob, reading.HolderPod, reading.HolderVM} {
		if other, _ := ident.HolderMatch(reading.Holder{Kind: k}); other != "" && other != level {
			if _, member := id.LabelValues(other); member {
				return false
			}
		}
	}
	return true
}

// holderMatch names the workload level and label values a holder is.
func holderMatch(h reading.Holder) (ident.Kind, map[string]string) {
	return ident.HolderMatch(h)
}

// heldBy is the holder a published record names, as its allocation
// source named it (holderRecord's inverse, less the record's figures).
func heldBy(h *snapshot.GPUHolder) reading.Holder {
	return reading.Holder{Kind: reading.HolderKind(h.Kind), JobID: h.JobID, Namespace: h.Namespace, Pod: h.Pod,
		Container: h.Container, VMName: h.VM, VMUUID: h.VMUUID}
}

// publish adds each device as a zone (gpu, Socket = index) and its record,
// and the GPU sources' health to the meters' health.
func (g *gpuStage) publish(iv *interval, s *snapshot.Snapshot) {
	now, retention := iv.now, g.retention
	for _, k := range g.order {
		d := g.devs[k]
		rec := d.rec
		s.Zones = append(s.Zones, snapshot.Zone{ZoneID: reading.ZoneID{Name: reading.ZoneGPU, Socket: d.zone},
			Source: rec.Source, EnergyJ: rec.EnergyJ, IdleJ: rec.IdleJ, DynamicJ: rec.DynamicJ,
			UnattributedJ: rec.UnattributedJ, PowerW: rec.PowerW, IdleClamps: rec.IdleClamps})
		if rec.Holder != nil {
			h := *rec.Holder
			rec.Holder = &h
		}
		rec.Holders = append([]snapshot.GPUHolder(nil), rec.Holders...)
		rec.InstanceHolders = append([]snapshot.GPUHolder(nil), rec.InstanceHolders...)
		rec.Processes = nil
		for _, p := range retained(d.procs, now, retention, nil) {
			rec.Processes = append(rec.Processes, p.rec)
		}
		// A PID reused while its previous process is retained: only the
		// newer record is published (its series restarts, as a counter
		// of a new process does), never the two under one pid label.
		sort.Slice(rec.Processes, func(i, j int) bool {
			a, b := rec.Processes[i], rec.Processes[j]
			if a.PID != b.PID {
				return a.PID < b.PID
			}
			return a.LastSeen.After(b.LastSeen)
		})
		rec.Processes = slices.CompactFunc(rec.Processes, func(a, b snapshot.GPUProcess) bool { return a.PID == b.PID })
		s.GPUs = append(s.GPUs, rec)
	}
	s.Meters = append(s.Meters, g.health...)
}
