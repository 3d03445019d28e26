package measure

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/wattrace/wattrace/pkg/carbon"
	"github.com/wattrace/wattrace/pkg/model"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/reading"
)

// Methods of a zone's energy.
const (
	MethodMeasured  = "measured"
	MethodEstimated = "estimated"
	// MethodHost: measured by the hypervisor and passed to this VM
	// (pkg/power/hostshare).
	MethodHost = "host"
)

// EstimateBand is the relative band put around estimated energy when the
// model reports none of its own (power.EstimateReporter gives the fit's
// band): the estimator's models err by tens of percent (docs/meters.md).
const EstimateBand = 0.30

// Zone is one energy zone over one run.
type Zone struct {
	Zone   string `json:"zone"`
	Socket int    `json:"socket"`
	Source string `json:"source"`
	Method string `json:"method"`
	// CPUShare is the command's share of the CPU time this zone was
	// split by (on multi-socket nodes, the time on the zone's socket).
	CPUShare float64 `json:"cpu_share"`
	// Band is [low, high] joules of the command's energy for estimated
	// zones; absent when measured.
	Band *[2]float64 `json:"band_joules,omitempty"`
	// The node's energy over the run and its split.
	NodeJ        float64 `json:"node_joules"`
	NodeIdleJ    float64 `json:"node_idle_joules"`
	NodeDynamicJ float64 `json:"node_dynamic_joules"`
	// The command's share: dynamic by its CPU share, idle by policy.
	DynamicJ float64 `json:"dynamic_joules"`
	IdleJ    float64 `json:"idle_joules"`
	// IdleClamped: the idle baseline exceeded what the zone measured.
	IdleClamped bool `json:"idle_clamped,omitempty"`
}

// Run is one run's record.
type Run struct {
	Run         int      `json:"run"`
	ExitStatus  int      `json:"exit_status"`
	Interrupted bool     `json:"interrupted"`
	Signals     []string `json:"signals,omitempty"`
	WallSeconds float64  `json:"wall_seconds"`
	// CPUSeconds is the command's CPU time by the accounting used;
	// UserSeconds and SystemSeconds come from the child tree's rusage.
	CPUSeconds    float64 `json:"cpu_seconds"`
	UserSeconds   float64 `json:"user_seconds"`
	SystemSeconds float64 `json:"system_seconds"`
	// KernelCPUSeconds is the kernel's own accounting of the command's
	// cgroup (cpuacct.usage, cpu.stat usage_usec), when there is one.
	KernelCPUSeconds *float64 `json:"kernel_cpu_seconds,omitempty"`
	NodeCPUSeconds   float64  `json:"node_cpu_seconds"`
	CPUShare         float64  `json:"cpu_share"`
	// Totals over the zones that do not overlap (platform when measured,
	// else package + dram + gpu).
	EnergyJ      float64 `json:"energy_joules"`
	DynamicJ     float64 `json:"dynamic_joules"`
	IdleJ        float64 `json:"idle_joules"`
	NodeEnergyJ  float64 `json:"node_energy_joules"`
	AverageW     float64 `json:"average_watts"`
	NodeAverageW float64 `json:"node_average_watts"`
	Grams        float64 `json:"grams"`
	NodeGrams    float64 `json:"node_grams"`
	Zones        []Zone  `json:"zones"`
}

// Baseline is the idle power per zone, from --idle or the meter's model.
type Baseline struct {
	// Source is "measured" (--idle), "model" (the meter knows it) or
	// "none".
	Source  string             `json:"source"`
	Seconds float64            `json:"seconds,omitempty"`
	Watts   map[string]float64 `json:"watts,omitempty"` // by zone key "package-0"
}

func zoneKey(zone string, socket int) string {
	if socket < 0 {
		return zone
	}
	return fmt.Sprintf("%s-%d", zone, socket)
}

// attribution is what turns raw readings into a Run.
type attribution struct {
	meter       power.Meter
	policy      model.IdlePolicy
	baseline    Baseline
	gramsPerKWh float64
	nsockets    int
}

// fraction is socket s's part of the time with a known socket; evenly
// when nothing was placed.
func (b bySocket) fraction(s, nsockets int) float64 {
	var known float64
	for sock, v := range b {
		if sock >= 0 {
			known += v
		}
	}
	if known == 0 {
		return 1 / float64(nsockets)
	}
	return b[s] / known
}

func share(a, b float64) float64 {
	if a+b <= 0 {
		return 0
	}
	return a / (a + b)
}

// combined is a meter made of several (power.Combined): each zone is
// measured or estimated as its own meter is.
type combined interface{ Meters() []power.Meter }

var _ combined = (*power.Combined)(nil)

// method says how a zone's source got its figures: the member of a
// combined meter that bears the name, measured or estimated as it says;
// the host's share (named "host" or "host:<host>") is the host's unless
// the host estimated; a sample named by a stand-in (the estimator while
// the host's share is stale) is what its name says.
// A sample that carries its method (a host's share, per zone) is what it
// says.
func (a *attribution) method(source, sampleMethod string) string {
	host := source == "host" || strings.HasPrefix(source, "host:")
	est, found := false, false
	if sampleMethod != "" {
		est, found = sampleMethod == MethodEstimated, true
	}
	if c, ok := a.meter.(combined); ok && !found {
		for _, m := range c.Meters() {
			if m.Name() == source {
				est, found = m.Estimated(), true
			}
		}
	}
	if !found {
		switch {
		case a.meter.Name() == source:
			est = a.meter.Estimated()
		case source == "estimator":
			est = true
		case !host:
			est = a.meter.Estimated()
		}
	}
	switch {
	case est:
		return MethodEstimated
	case host:
		return MethodHost
	}
	return MethodMeasured
}

// bandOf is the relative band [low, high] of an estimated zone: the
// model's own (its power's bounds over its power at the end of the run),
// else ±EstimateBand.
func bandOf(bands map[string][2]float64, source string, zone string, socket int) (float64, float64) {
	if b, ok := bands[source+"/"+zoneKey(zone, socket)]; ok {
		return b[0], b[1]
	}
	return 1 - EstimateBand, 1 + EstimateBand
}

func (a *attribution) idleWatts(zone string, socket int) float64 {
	if w, ok := a.baseline.Watts[zoneKey(zone, socket)]; ok {
		return w
	}
	return 0
}

// run attributes one run's energy. Every value read is checked
// (pkg/reading) before it is used; a rejected reading stops the run's
// report with an error rather than crediting a wrong figure.
func (a *attribution) run(i int, r raw) (Run, error) {
	wall := r.end.at.Sub(r.start.at)
	out := Run{
		Run: i, ExitStatus: r.exit, Interrupted: r.interrupted, Signals: r.signals,
		WallSeconds: wall.Seconds(), UserSeconds: r.user, SystemSeconds: r.sys,
	}
	for _, v := range []struct {
		what string
		x    float64
	}{{"command CPU time", r.cmdNs}, {"node CPU time", r.nodeNs}} {
		if err := reading.CheckGauge(v.x, math.MaxFloat64); err != nil {
			return out, fmt.Errorf("%s: %w", v.what, err)
		}
	}
	cmd, node := r.cmdNs/1e9, r.nodeNs/1e9
	// The command's time is part of the node's; the two are read from
	// one source but at slightly different instants.
	node = max(node, cmd)
	out.CPUSeconds, out.NodeCPUSeconds = cmd, node
	if node > 0 {
		out.CPUShare = cmd / node
	}
	if r.haveKernel {
		k := r.kernelCPU
		out.KernelCPUSeconds = &k
	}

	prev := map[string]float64{}
	for _, z := range r.start.zones {
		prev[z.Source+"/"+zoneKey(z.Zone, z.Socket)] = z.Joules
	}
	type key int
	const (
		command key = iota
		rest
	)
	total := map[key]float64{command: cmd, rest: node - cmd}
	var platform bool
	for _, z := range r.end.zones {
		if z.Zone == reading.ZonePlatform {
			platform = true
		}
	}
	for _, z := range r.end.zones {
		j0, ok := prev[z.Source+"/"+zoneKey(z.Zone, z.Socket)]
		if !ok {
			continue
		}
		dE := z.Joules - j0
		if err := reading.CheckGauge(dE, math.MaxFloat64); err != nil {
			return out, fmt.Errorf("zone %s: energy went from %g J to %g J: %w", zoneKey(z.Zone, z.Socket), j0, z.Joules, err)
		}
		source := z.Source
		if source == "" {
			source = a.meter.Name()
		}
		usage := total
		if z.Socket >= 0 && a.nsockets > 1 && r.cmdSock != nil {
			// A socket's zone is split by the usage on that socket.
			c := cmd * r.cmdSock.fraction(z.Socket, a.nsockets)
			rst := (node - cmd) * r.restSock.fraction(z.Socket, a.nsockets)
			if len(r.nodeSock) > 0 {
				// The socket's own busy time is the kernel's per-CPU
				// figure; the command's processes are placed by where
				// they ran, and the rest is what remains (the rest's
				// many processes migrate too much to place one by one).
				rst = max(node*r.nodeSock.fraction(z.Socket, a.nsockets)-c, 0)
			}
			usage = map[key]float64{command: c, rest: rst}
		}
		dyn, idle := map[key]float64{}, map[key]float64{}
		res := model.Split(model.Interval[key]{
			EnergyJ: dE, IdleJ: a.idleWatts(z.Zone, z.Socket) * wall.Seconds(),
			Usage: usage, Policy: a.policy,
		}, dyn, idle)
		zone := Zone{
			Zone: z.Zone, Socket: z.Socket, Source: source, Method: MethodMeasured, CPUShare: share(usage[command], usage[rest]),
			NodeJ: dE, NodeIdleJ: res.IdleJ, NodeDynamicJ: res.DynamicJ,
			DynamicJ: dyn[command], IdleJ: idle[command], IdleClamped: res.Clamped,
		}
		zone.Method = a.method(source, z.Method)
		if zone.Method == MethodEstimated {
			lo, hi := bandOf(r.bands, source, z.Zone, z.Socket)
			j := zone.DynamicJ + zone.IdleJ
			zone.Band = &[2]float64{j * lo, j * hi}
		}
		out.Zones = append(out.Zones, zone)
		if counts(z.Zone, platform) {
			out.EnergyJ += zone.DynamicJ + zone.IdleJ
			out.DynamicJ += zone.DynamicJ
			out.IdleJ += zone.IdleJ
			out.NodeEnergyJ += dE
		}
	}
	gz, err := a.gpuZones(r.gpu)
	if err != nil {
		return out, err
	}
	for _, z := range gz {
		out.Zones = append(out.Zones, z)
		if counts(z.Zone, platform) {
			out.EnergyJ += z.DynamicJ + z.IdleJ
			out.DynamicJ += z.DynamicJ
			out.IdleJ += z.IdleJ
			out.NodeEnergyJ += z.NodeJ
		}
	}
	sort.Slice(out.Zones, func(i, j int) bool {
		a, b := out.Zones[i], out.Zones[j]
		if a.Zone != b.Zone {
			return zoneOrder(a.Zone) < zoneOrder(b.Zone)
		}
		return a.Socket < b.Socket
	})
	if s := wall.Seconds(); s > 0 {
		out.AverageW = out.EnergyJ / s
		out.NodeAverageW = out.NodeEnergyJ / s
	}
	out.Grams = carbon.Grams(out.EnergyJ, a.gramsPerKWh)
	out.NodeGrams = carbon.Grams(out.NodeEnergyJ, a.gramsPerKWh)
	return out, nil
}

// counts says whether a zone adds to the totals: a platform meter covers
// everything else; without one, the packages, DRAM and GPUs do (core,
// uncore and psys overlap them).
func counts(zone string, platform bool) bool {
	if platform {
		return zone == reading.ZonePlatform
	}
	return zone == reading.ZonePackage || zone == reading.ZoneDRAM || zone == reading.ZoneGPU
}

func zoneOrder(z string) int {
	for i, n := range []string{reading.ZonePlatform, reading.ZonePsys, reading.ZonePackage, reading.ZoneCore, reading.ZoneUncore, reading.ZoneDRAM, reading.ZoneGPU} {
		if n == z {
			return i
		}
	}
	return 100
}

// baseline measures the node's power over d with nothing of ours running.
func (e *Env) baseline(ctx context.Context, d time.Duration, sleep func(time.Duration) bool) (Baseline, error) {
	s0, err := e.readNode(ctx, true)
	if err != nil {
		return Baseline{}, err
	}
	if e.GPUs != nil {
		_ = e.GPUs.Interval(ctx, s0.at)
	}
	if !sleep(d) {
		return Baseline{}, errInterrupted
	}
	s1, err := e.readNode(ctx, false)
	if err != nil {
		return Baseline{}, err
	}
	e.advance(s0.at, nodeDelta(s0, s1), s1.at)
	if err := e.readMeter(ctx, &s1); err != nil {
		return Baseline{}, err
	}
	secs := s1.at.Sub(s0.at).Seconds()
	b := Baseline{Source: "measured", Seconds: secs, Watts: map[string]float64{}}
	prev := map[string]float64{}
	for _, z := range s0.zones {
		prev[z.Source+"/"+zoneKey(z.Zone, z.Socket)] = z.Joules
	}
	for _, z := range s1.zones {
		j0, ok := prev[z.Source+"/"+zoneKey(z.Zone, z.Socket)]
		if !ok {
			continue
		}
		w := (z.Joules - j0) / secs
		if err := reading.CheckGauge(w, math.MaxFloat64); err != nil {
			return b, fmt.Errorf("idle baseline of zone %s: %w", zoneKey(z.Zone, z.Socket), err)
		}
		b.Watts[zoneKey(z.Zone, z.Socket)] = w
	}
	if e.GPUs != nil {
		for _, g := range e.gpuRead(ctx, s1.at, func(int) bool { return false }) {
			if g.dt <= 0 {
				continue
			}
			w := g.energyJ / g.dt.Seconds()
			if err := reading.CheckGauge(w, math.MaxFloat64); err != nil {
				return b, fmt.Errorf("idle baseline of %s: %w", gpuKey(g), err)
			}
			b.Watts[gpuKey(g)] = w
		}
	}
	return b, nil
}

// modelBaseline is the meter's own idle power, where it has one.
func modelBaseline(ctx context.Context, m power.Meter) Baseline {
	im, ok := m.(power.IdleModeler)
	if !ok {
		return Baseline{Source: "none"}
	}
	b := Baseline{Source: "model", Watts: map[string]float64{}}
	zs, err := m.Read(ctx)
	if err != nil {
		return Baseline{Source: "none"}
	}
	for _, z := range zs {
		if w, ok := im.IdleWatts(z.Zone); ok {
			b.Watts[zoneKey(z.Zone, z.Socket)] = w
		}
	}
	if len(b.Watts) == 0 {
		return Baseline{Source: "none"}
	}
	return b
}
