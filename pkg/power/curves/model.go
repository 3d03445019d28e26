package curves

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Levels are the load levels (percent) a curve is given at: SPECpower's
// active idle and 10..100%.
var Levels = [NumLevels]float64{0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100}

// NumLevels is len(Levels).
const NumLevels = 11

// Tier names say how much the model knew about the CPU.
const (
	TierCPU     = "cpu"     // the model string is a CPU of the fitted table: its TDP and architecture are known
	TierArch    = "arch"    // only its microarchitecture was recognised
	TierGeneric = "generic" // nothing was recognised: threads, sockets and memory only
)

// Tier is one fitted regression: per load level, log(watts) is linear in
// the named features; Low and High are the quantiles of the held-in
// cross-validation residuals (log(measured/predicted)) that make the band.
type Tier struct {
	Name     string               `json:"name"`
	Features []string             `json:"features"`
	Coef     [NumLevels][]float64 `json:"coef"`
	Low      [NumLevels]float64   `json:"band_low"`
	High     [NumLevels]float64   `json:"band_high"`
	// LowNoMem and HighNoMem are the band for a node that does not give
	// its memory (imputed from its threads).
	LowNoMem  [NumLevels]float64 `json:"band_low_memory_unknown"`
	HighNoMem [NumLevels]float64 `json:"band_high_memory_unknown"`
	// LowHeavy and HighHeavy are the band for a memory-heavy node (at
	// least Fit.HeavyMemory GiB per thread); Low and High are then the
	// others'. Equal to Low and High when the fit has no such class.
	LowHeavy  [NumLevels]float64 `json:"band_low_memory_heavy"`
	HighHeavy [NumLevels]float64 `json:"band_high_memory_heavy"`
	// Offsets are per-CPU corrections of log watts (cpu tier only): the
	// shrunk mean residual of that CPU's fitted results.
	Offsets map[string]*[NumLevels]float64 `json:"cpu_offsets,omitempty"`
	// Configs are per-configuration corrections on top of Offsets (cpu
	// tier only), sorted by key.
	Configs []ConfigOffset `json:"config_offsets,omitempty"`
	// CV holds the cross-validation log residuals while fitting; not
	// saved.
	CV []float64 `json:"-"`
}

// ConfigOffset is the correction of log watts for one measured server
// configuration; a node matches it with the same CPU, sockets and threads
// and memory within 10% (MemTotal is a little below what is installed).
type ConfigOffset struct {
	CPU       string             `json:"cpu"`
	Sockets   int                `json:"sockets"`
	Threads   int                `json:"threads"`
	MemoryGiB float64            `json:"memory_gib"`
	Offset    [NumLevels]float64 `json:"offset"`
}

func (c ConfigOffset) key() string {
	return configKey(inputs{key: c.CPU, sockets: float64(c.Sockets), threads: float64(c.Threads), memG: c.MemoryGiB})
}

// config returns the configuration offset a node matches, if any: only
// for a node whose memory was given.
func (t *Tier) config(in inputs) *ConfigOffset {
	if !in.memGiven {
		return nil
	}
	var best *ConfigOffset
	bestD := math.Log(1.1)
	for i := range t.Configs {
		c := &t.Configs[i]
		if c.CPU != in.key || float64(c.Sockets) != in.sockets || float64(c.Threads) != in.threads {
			continue
		}
		if d := math.Abs(math.Log(in.memG / c.MemoryGiB)); d <= bestD {
			best, bestD = c, d
		}
	}
	return best
}

// CPUSpec is what the fitted table knows of one CPU model.
type CPUSpec struct {
	TDP   float64 `json:"tdp_w"` // per socket
	Group string  `json:"arch"`
}

// Fit is the fitted model (fit.json), written by scripts/fitpower.
type Fit struct {
	Source  string `json:"source"`
	License string `json:"license"`
	Split   string `json:"split"`
	Fitted  int    `json:"fitted_results"`
	// FittedDigest is IDDigest of the results the fit was trained on.
	FittedDigest string     `json:"fitted_ids_sha256"`
	HeldOut      int        `json:"held_out_results"`
	Quantile     [2]float64 `json:"band_quantiles"`
	Groups       []string   `json:"arch_groups"`
	Tiers        []Tier     `json:"tiers"`
	// CPUs is every CPU of the fitted results, by normalised model key.
	CPUs map[string]CPUSpec `json:"cpus"`
	// Memory imputes log(memory GiB) from log(threads) when the memory is
	// not given: [intercept, slope].
	Memory [2]float64 `json:"memory_from_threads"`
	// TDPPerThread is the median per-thread TDP by group (and "" for all),
	// used for the package curve when the CPU's own TDP is unknown.
	TDPPerThread map[string]float64 `json:"tdp_per_thread"`
	// Shape is the median of power/power-at-100% at each level.
	Shape [NumLevels]float64 `json:"shape"`
	// HeavyMemory is the GiB per hardware thread from which a node gets
	// its tier's memory-heavy band (Options.HeavyMemory); 0 none.
	HeavyMemory float64 `json:"memory_heavy_gib_per_thread"`
}

//go:embed fit.json
var fitJSON []byte

// Model is the estimator's knowledge: the fitted whole-server curves, the
// microarchitecture table and the package curve. It is immutable.
type Model struct {
	fit   Fit
	archs archTable
	tiers map[string]*Tier
}

// Default returns the model built into the binary.
func Default() (*Model, error) { return New(fitJSON, archsJSON) }

// New builds a model from a fit and an architecture table (JSON), checking
// both.
func New(fit, archs []byte) (*Model, error) {
	var f Fit
	if err := json.Unmarshal(fit, &f); err != nil {
		return nil, fmt.Errorf("curves: parse fit: %w", err)
	}
	t, err := parseArchs(archs)
	if err != nil {
		return nil, fmt.Errorf("curves: %w", err)
	}
	m := &Model{fit: f, archs: t, tiers: map[string]*Tier{}}
	for i := range f.Tiers {
		tr := &m.fit.Tiers[i]
		for l := 0; l < NumLevels; l++ {
			if len(tr.Coef[l]) != len(tr.Features) {
				return nil, fmt.Errorf("curves: tier %q level %v: %d coefficients for %d features", tr.Name, Levels[l], len(tr.Coef[l]), len(tr.Features))
			}
			for _, c := range tr.Coef[l] {
				if !finite(c) {
					return nil, fmt.Errorf("curves: tier %q level %v: coefficient %v", tr.Name, Levels[l], c)
				}
			}
			for _, b := range [][2]float64{{tr.Low[l], tr.High[l]}, {tr.LowNoMem[l], tr.HighNoMem[l]}, {tr.LowHeavy[l], tr.HighHeavy[l]}} {
				if !finite(b[0]) || !finite(b[1]) || b[0] > 0 || b[1] < 0 {
					return nil, fmt.Errorf("curves: tier %q level %v: band [%v, %v] must hold 0", tr.Name, Levels[l], b[0], b[1])
				}
			}
		}
		m.tiers[tr.Name] = tr
	}
	for _, name := range []string{TierCPU, TierArch, TierGeneric} {
		if m.tiers[name] == nil {
			return nil, fmt.Errorf("curves: fit has no tier %q", name)
		}
	}
	if !finite(f.HeavyMemory) || f.HeavyMemory < 0 {
		return nil, fmt.Errorf("curves: fit memory_heavy_gib_per_thread %v: want 0 (none) or more", f.HeavyMemory)
	}
	for l, r := range f.Shape {
		if !finite(r) || r <= 0 || r > 1.0001 || (l > 0 && r < f.Shape[l-1]) {
			return nil, fmt.Errorf("curves: fit shape %v: want increasing ratios in (0, 1]", f.Shape)
		}
	}
	return m, nil
}

// Fit returns the fitted figures and their provenance.
func (m *Model) Fit() Fit { return m.fit }

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// Node is what a node knows about itself.
type Node struct {
	CPU     string // the CPU model string (/proc/cpuinfo "model name")
	Sockets int
	Threads int // online hardware threads (vCPUs in a VM)
	// MemoryGiB is the installed memory; 0 means unknown (imputed from the
	// thread count, and the fallback says so).
	MemoryGiB float64
}

// Limits on a Node: beyond them the input is a typo, not a server.
const (
	MaxSockets   = 64
	MaxThreads   = 1 << 16
	MaxMemoryGiB = 1 << 20
)

// ErrInput marks a Node the model cannot take.
var ErrInput = errors.New("invalid node")

// Validate rejects absurd nodes, naming the field.
func (n Node) Validate() error {
	switch {
	case n.Sockets < 1 || n.Sockets > MaxSockets:
		return fmt.Errorf("%w: sockets %d: want 1..%d", ErrInput, n.Sockets, MaxSockets)
	case n.Threads < 1 || n.Threads > MaxThreads:
		return fmt.Errorf("%w: threads %d: want 1..%d", ErrInput, n.Threads, MaxThreads)
	case n.Threads < n.Sockets:
		return fmt.Errorf("%w: threads %d fewer than sockets %d", ErrInput, n.Threads, n.Sockets)
	case !finite(n.MemoryGiB) || n.MemoryGiB < 0 || n.MemoryGiB > MaxMemoryGiB:
		return fmt.Errorf("%w: memory %v GiB: want 0 (unknown) or up to %d", ErrInput, n.MemoryGiB, MaxMemoryGiB)
	}
	return nil
}

// Estimate is one predicted power with its band.
type Estimate struct {
	Watts, Lower, Upper float64
}

// Kind says which curve a Curve is.
const (
	KindServer  = "server"  // whole-server wall power (SPECpower fit)
	KindPackage = "package" // CPU packages (TDP ratio curve)
	KindVM      = "vm"      // a VM's vCPUs (CCF per-vCPU figures shaped by the server curve)
)

// Info says what a curve was built from.
type Info struct {
	Kind   string
	Tier   string // TierCPU, TierArch or TierGeneric
	CPU    string // the normalised model key
	Arch   string // the architecture row, "" when none matched
	Source string // the coefficients' source, short
	// Fallbacks list, in words, what the model did not know and what it
	// used instead; empty when it knew everything it uses.
	Fallbacks []string
}

// Curve is a node's predicted power at each level of Levels.
type Curve struct {
	Points [NumLevels]Estimate
	Info   Info
}

// At interpolates the curve linearly at load (0..1; clamped, NaN as 0).
func (c Curve) At(load float64) Estimate {
	switch {
	case !(load >= 0):
		load = 0
	case load > 1:
		load = 1
	}
	x := load * 10
	i := int(x)
	if i >= NumLevels-1 {
		return c.Points[NumLevels-1]
	}
	f := x - float64(i)
	a, b := c.Points[i], c.Points[i+1]
	lerp := func(p, q float64) float64 { return p + (q-p)*f }
	return Estimate{Watts: lerp(a.Watts, b.Watts), Lower: lerp(a.Lower, b.Lower), Upper: lerp(a.Upper, b.Upper)}
}

// AtStolen is a VM's estimate at utilization util (the guest's busy time
// over the whole interval, 0..1) when the hypervisor stole the fraction
// stolen (0..1) of its vCPUs' time: the curve's idle whole, plus its
// dynamic part at load util/(1−stolen) (at most 1) for the 1−stolen of
// the time the vCPUs ran; the band's lower end by the same formula on the
// lower band, its upper end the upper band at that load, as if the stolen
// time were the guest's (docs/vm.md, "The estimate when the hypervisor
// steals CPU"). stolen 0 (or not in (0, 1], NaN) is At(util).
func (c Curve) AtStolen(util, stolen float64) Estimate {
	if !(stolen > 0) {
		return c.At(util)
	}
	stolen = math.Min(stolen, 1)
	own, load := 1-stolen, util
	if own > 0 && load > 0 {
		load = math.Min(load/own, 1)
	}
	p, idle := c.At(load), c.Points[0]
	return Estimate{
		Watts: idle.Watts + own*(p.Watts-idle.Watts),
		Lower: idle.Lower + own*(p.Lower-idle.Lower),
		Upper: p.Upper,
	}
}

// inputs are the resolved features of a node.
type inputs struct {
	key, group, vendor     string
	memGiven               bool
	tdp                    float64 // total over sockets; 0 unknown
	threads, sockets, memG float64
}

// resolve looks the node's CPU up and fills what is missing.
func (m *Model) resolve(n Node) (inputs, Info, error) {
	if err := n.Validate(); err != nil {
		return inputs{}, Info{}, err
	}
	key := Normalize(n.CPU)
	in := inputs{key: key, vendor: Vendor(key), threads: float64(n.Threads), sockets: float64(n.Sockets), memG: n.MemoryGiB, memGiven: n.MemoryGiB > 0}
	info := Info{CPU: key, Tier: TierGeneric}
	arch, archOK := m.archs.lookupArch(key)
	if archOK {
		info.Arch = arch.Name
		in.group = arch.Group
		info.Tier = TierArch
	}
	if spec, ok := m.fit.CPUs[key]; ok && key != "" {
		in.tdp = spec.TDP * float64(n.Sockets)
		in.group = spec.Group
		info.Tier = TierCPU
	}
	switch info.Tier {
	case TierArch:
		info.Fallbacks = append(info.Fallbacks, fmt.Sprintf("CPU %q is not in the fitted table: curve of its microarchitecture (%s) without its TDP", key, arch.Name))
	case TierGeneric:
		if key == "" {
			info.Fallbacks = append(info.Fallbacks, "no CPU model given: generic curve from threads, sockets and memory")
		} else {
			info.Fallbacks = append(info.Fallbacks, fmt.Sprintf("CPU %q not recognised: generic curve from threads, sockets and memory", key))
		}
	}
	if in.memG == 0 {
		in.memG = math.Exp(m.fit.Memory[0] + m.fit.Memory[1]*math.Log(in.threads))
		info.Fallbacks = append(info.Fallbacks, fmt.Sprintf("memory unknown: %.0f GiB assumed for %d threads", in.memG, n.Threads))
	}
	return in, info, nil
}

// feature is the value of one named feature for in.
func feature(name string, in inputs) float64 {
	switch {
	case name == "const":
		return 1
	case name == "log_threads":
		return math.Log(in.threads)
	case name == "log_sockets":
		return math.Log(in.sockets)
	case name == "log_memory":
		return math.Log(math.Max(in.memG, 0.5))
	case name == "log_tdp":
		return math.Log(math.Max(in.tdp, 1))
	case name == "low_power":
		if lowPower.MatchString(in.key) {
			return 1
		}
		return 0
	case name == "desktop":
		if desktop.MatchString(in.key) {
			return 1
		}
		return 0
	case name == "entry":
		if entry.MatchString(in.key) {
			return 1
		}
		return 0
	case name == "sku":
		return skuRank(in.key)
	case name == "log_threads_sq":
		return math.Log(in.threads) * math.Log(in.threads)
	// The four below were tried on cross-validation (fitpower -cv -extra
	// NAME) and not kept; docs/performance.md has their figures.
	case name == "mem_heavy": // log of GiB per thread above 2, 0 below
		return math.Max(0, math.Log(math.Max(in.memG, 0.5)/in.threads/2))
	case name == "log_memory_amd":
		if in.vendor == "amd" {
			return math.Log(math.Max(in.memG, 0.5))
		}
		return 0
	case name == "many_sockets":
		if in.sockets >= 4 {
			return 1
		}
		return 0
	case name == "log_memory_sq":
		v := math.Log(math.Max(in.memG, 0.5))
		return v * v
	case strings.HasPrefix(name, "arch:"):
		if in.group == name[len("arch:"):] {
			return 1
		}
		return 0
	case strings.HasPrefix(name, "vendor:"):
		if in.vendor == name[len("vendor:"):] {
			return 1
		}
		return 0
	}
	return 0
}

var (
	// lowPower matches the suffixes vendors give low-power parts: Intel's
	// L (L5430, E5-2650L, E3-1265L v3), AMD's HE and EE.
	lowPower = regexp.MustCompile(`\bl\d{4}\b|-\d{4}l\b|\d(he|ee)\b`)
	// desktop matches client CPUs (Core, Pentium, Celeron, Ryzen).
	desktop = regexp.MustCompile(`core i\d|^i\d-|pentium|celeron|ryzen`)
	// entry matches single-socket entry server parts: Xeon E3, E-2xxx and
	// the 3000 series.
	entry = regexp.MustCompile(`\be3-|^xeon e-2|^xeon [xlew]?3\d{3}\b`)
	// skuNumber finds the digits of a model number that rank it within
	// its family: the last two of an Intel number (e5-2680 → 80, gold 6248
	// → 48, x5670 → 70) and of an Opteron (6376 → 76), or the middle two
	// of an EPYC (7742 → 74).
	skuIntel = regexp.MustCompile(`(?:\b[a-z]\d-\d|(?:platinum|gold|silver|bronze) \d|\b[xlew]\d|opteron \d)\d(\d\d)`)
	skuAMD   = regexp.MustCompile(`epyc \d(\d\d)\d`)
)

// skuRank is a model number's rank within its family, from -0.5 (lowest)
// to 0.5 (highest); 0 where the string has no number it can read.
func skuRank(key string) float64 {
	for _, re := range []*regexp.Regexp{skuIntel, skuAMD} {
		if m := re.FindStringSubmatch(key); m != nil {
			v, err := strconv.Atoi(m[1])
			if err == nil {
				return float64(v)/100 - 0.5
			}
		}
	}
	return 0
}

// predict evaluates a tier: the log-linear prediction per level, made
// non-decreasing in load, and its band.
func (m *Model) predict(t *Tier, in inputs) [NumLevels]Estimate {
	var out [NumLevels]Estimate
	prev := 0.0
	for l := 0; l < NumLevels; l++ {
		y := 0.0
		for i, f := range t.Features {
			y += t.Coef[l][i] * feature(f, in)
		}
		if off := t.Offsets[offsetKey(t.Name, in)]; off != nil {
			y += off[l]
		}
		if c := t.config(in); c != nil {
			y += c.Offset[l]
		}
		w := math.Max(math.Exp(y), prev)
		prev = w
		lo, hi := m.band(t, l, in)
		out[l] = Estimate{Watts: w, Lower: w * math.Exp(lo), Upper: w * math.Exp(hi)}
	}
	for l := 1; l < NumLevels; l++ {
		out[l].Lower = math.Max(out[l].Lower, out[l-1].Lower)
		out[l].Upper = math.Max(out[l].Upper, out[l-1].Upper)
	}
	return out
}

// band is the tier's log band at level l for a node that did not give
// its memory, gave one that is heavy for its threads, or another.
func (m *Model) band(t *Tier, l int, in inputs) (lo, hi float64) {
	switch {
	case !in.memGiven:
		return t.LowNoMem[l], t.HighNoMem[l]
	case memoryHeavy(in, m.fit.HeavyMemory):
		return t.LowHeavy[l], t.HighHeavy[l]
	}
	return t.Low[l], t.High[l]
}

// Server is the whole-server wall power curve of a bare-metal node: the
// SPECpower fit of the most specific tier the node's CPU allows.
func (m *Model) Server(n Node) (Curve, error) {
	in, info, err := m.resolve(n)
	if err != nil {
		return Curve{}, err
	}
	info.Kind = KindServer
	info.Source = "SPECpower_ssj2008 fit (" + info.Tier + " tier)"
	return Curve{Points: m.predict(m.tiers[info.Tier], in), Info: info}, nil
}

// PackageRatio is the CPU package power as a fraction of TDP at 0, 10, 50
// and 100% load: Teads' measurements (B. Davy, "Estimating AWS EC2
// Instances Power Consumption", Teads Engineering, 2021), as the Green
// Software Foundation's Impact Framework "teads-curve" model uses them.
var PackageRatio = [4][2]float64{{0, 0.12}, {10, 0.32}, {50, 0.75}, {100, 1.02}}

func packageRatio(level float64) float64 {
	for i := 1; i < len(PackageRatio); i++ {
		a, b := PackageRatio[i-1], PackageRatio[i]
		if level <= b[0] {
			return a[1] + (b[1]-a[1])*(level-a[0])/(b[0]-a[0])
		}
	}
	return PackageRatio[len(PackageRatio)-1][1]
}

// Package is the CPU packages' power: TDP × Teads' ratio curve. The TDP
// is the fitted table's for a known CPU, else the median TDP per thread
// of its architecture (or of all CPUs) times the threads. Its band is the
// whole-server band of the same tier, relative: there is no package
// measurement here to fit one on (docs/meters.md says so).
func (m *Model) Package(n Node) (Curve, error) {
	in, info, err := m.resolve(n)
	if err != nil {
		return Curve{}, err
	}
	info.Kind = KindPackage
	info.Source = "TDP x Teads ratio curve"
	tdp := in.tdp
	if tdp == 0 {
		per, ok := m.fit.TDPPerThread[in.group]
		if !ok || in.group == "" {
			per = m.fit.TDPPerThread[""]
		}
		tdp = per * in.threads
		info.Fallbacks = append(info.Fallbacks, fmt.Sprintf("TDP unknown: %.1f W per thread assumed, %.0f W in all", per, tdp))
	}
	t := m.tiers[info.Tier]
	var c Curve
	c.Info = info
	for l := 0; l < NumLevels; l++ {
		w := tdp * packageRatio(Levels[l])
		lo, hi := m.band(t, l, in)
		c.Points[l] = Estimate{Watts: w, Lower: w * math.Exp(lo), Upper: w * math.Exp(hi)}
	}
	return c, nil
}

// VM is a virtual machine's power: its vCPUs times Cloud Carbon
// Footprint's per-vCPU figures for the host's microarchitecture (the
// average where none matches), from idle to full load along the median
// SPECpower curve's shape rather than a straight line. The band is the
// relative whole-server band of the tier the CPU string allows.
func (m *Model) VM(n Node) (Curve, error) {
	_, info, err := m.resolve(n)
	if err != nil {
		return Curve{}, err
	}
	info.Kind = KindVM
	lo, hi := m.archs.Average.MinW, m.archs.Average.MaxW
	info.Source = "Cloud Carbon Footprint per-vCPU average shaped by SPECpower"
	if a, ok := m.archs.lookupArch(info.CPU); ok && a.MaxW > 0 {
		lo, hi = a.MinW, a.MaxW
		info.Source = "Cloud Carbon Footprint per-vCPU " + a.Name + " shaped by SPECpower"
	} else {
		info.Fallbacks = append(info.Fallbacks, fmt.Sprintf("no per-vCPU figures for %q: CCF's average %.2f-%.2f W per vCPU", info.CPU, lo, hi))
	}
	return m.PerVCPU(n, lo, hi, info)
}

// PerVCPU is VM with given per-vCPU figures (watts at idle and at full
// load; configuration overrides CCF's with it).
func (m *Model) PerVCPU(n Node, minW, maxW float64, info Info) (Curve, error) {
	if err := checkPerVCPU("per-vCPU", minW, maxW); err != nil {
		return Curve{}, fmt.Errorf("%w: %v", ErrInput, err)
	}
	if err := n.Validate(); err != nil {
		return Curve{}, err
	}
	if info.Kind == "" {
		info.Kind = KindVM
	}
	t := m.tiers[info.Tier]
	if t == nil {
		t = m.tiers[TierGeneric]
	}
	s0, s1 := m.fit.Shape[0], m.fit.Shape[NumLevels-1]
	c := Curve{Info: info}
	for l := 0; l < NumLevels; l++ {
		shape := (m.fit.Shape[l] - s0) / (s1 - s0)
		w := float64(n.Threads) * (minW + (maxW-minW)*shape)
		c.Points[l] = Estimate{Watts: w, Lower: w * math.Exp(t.Low[l]), Upper: w * math.Exp(t.High[l])}
	}
	return c, nil
}

// Linear is the model this package replaced, kept to compare against:
// threads × CCF's per-vCPU figures (architecture row, else the average),
// straight from idle to full load.
func (m *Model) Linear(n Node, load float64) float64 {
	lo, hi := m.archs.Average.MinW, m.archs.Average.MaxW
	if a, ok := m.archs.lookupArch(Normalize(n.CPU)); ok && a.MaxW > 0 {
		lo, hi = a.MinW, a.MaxW
	}
	return float64(n.Threads) * (lo + (hi-lo)*load)
}

// CapAt limits c to limit at every level (watts and band), noting it in
// the fallbacks when it bites: the package zone is part of the platform,
// and Teads' TDP ratios (measured flat out on cloud hosts) can exceed a
// whole efficient server's SPECpower figure at low load.
func CapAt(c, limit Curve) Curve {
	capped := false
	for l := range c.Points {
		p, q := &c.Points[l], limit.Points[l]
		if p.Watts > q.Watts {
			capped = true
		}
		p.Watts, p.Lower, p.Upper = math.Min(p.Watts, q.Watts), math.Min(p.Lower, q.Lower), math.Min(p.Upper, q.Upper)
		p.Lower = math.Min(p.Lower, p.Watts)
		p.Upper = math.Max(p.Upper, p.Watts)
	}
	if capped {
		c.Info.Fallbacks = append(append([]string(nil), c.Info.Fallbacks...), "package capped at the whole-server curve where the TDP ratio curve exceeds it")
	}
	return c
}
