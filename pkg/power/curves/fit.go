package curves

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"sort"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/stat"
)

// Result is one measured server: what a node would know of itself (CPU
// model string, sockets, threads, memory), its CPU's TDP per socket as the
// result states it (0 unknown), and its wall power at each of Levels.
type Result struct {
	ID        string
	CPU       string
	TDP       float64
	Sockets   int
	Threads   int
	MemoryGiB float64
	Watts     [NumLevels]float64
	// Cores are the physical cores in all (0 unknown); the model does not
	// use them (a node's threads are what it knows for certain), the
	// accuracy report segments by memory per core.
	Cores int
}

// HeldOut tells whether a result belongs to the test split: one in five,
// chosen by the FNV-1a hash of its id, so the split is the same on every
// machine and for every version of the data that keeps the ids.
func HeldOut(id string) bool {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return h.Sum32()%5 == 0
}

// Split parts results into the fitted split and the held-out one, in
// their order. The curves are trained on fitted only and scored on
// heldOut only; no result is in both.
func Split(results []Result) (fitted, heldOut []Result) {
	for _, r := range results {
		if HeldOut(r.ID) {
			heldOut = append(heldOut, r)
		} else {
			fitted = append(fitted, r)
		}
	}
	return fitted, heldOut
}

// IDDigest is the hex SHA-256 of the results' ids, sorted and each ended
// by a newline: what Fit.FittedDigest records, so that a fit can be
// checked against the split it claims without the data in the
// repository.
func IDDigest(results []Result) string {
	ids := make([]string, len(results))
	for i, r := range results {
		ids[i] = r.ID
	}
	sort.Strings(ids)
	h := sha256.New()
	for _, id := range ids {
		_, _ = io.WriteString(h, id+"\n")
	}
	return hex.EncodeToString(h.Sum(nil))
}

// SplitRule says in words what HeldOut does, for fit.json and the docs.
const SplitRule = "held out: FNV-1a 32-bit hash of the result id mod 5 == 0 (curves.HeldOut); fitted: the rest"

// Options tune Train.
type Options struct {
	// Quantiles of the cross-validated log residuals that bound the band.
	Quantiles [2]float64
	// Folds of the cross-validation the band's residuals come from.
	Folds int
	// Lambda is the ridge penalty on every coefficient but the intercept.
	Lambda float64
	// MinGroup is how many fitted results an architecture group needs to
	// get its own coefficient.
	MinGroup int
	// Shrink is the pseudo-count that pulls a CPU's own offset (the mean
	// residual of its fitted results) toward zero in the cpu tier; 0
	// turns the offsets off.
	Shrink float64
	// ConfigShrink is the same for a server configuration's offset on
	// top of its CPU's; 0 turns them off.
	ConfigShrink float64
	// Huber makes the regression robust: iteratively reweighted least
	// squares with Huber's weights (tuning 1.345 robust standard
	// deviations), so a few odd servers do not pull the curves.
	Huber bool
	// FamilyShrink is the pseudo-count of the arch tier's per-family
	// offsets (Family: the model number without its rank digits, e5-26xx
	// v3), for CPUs the table lacks; 0 turns them off.
	FamilyShrink float64
	// CPUWeight weighs the arch and generic tiers' results by 1/(results
	// of the same CPU), so that the CPUs many vendors measured do not
	// outweigh the rest: those tiers stand in for CPUs the table lacks.
	CPUWeight bool
	// Extra features for every tier (experiments).
	Extra []string
	// HeavyMemory is the memory per hardware thread (GiB) from which a
	// node that gives its memory gets the memory-heavy band; 0 gives
	// every node the same band.
	HeavyMemory float64

	weights []float64 // per result, set by trainTier; nil: all 1
}

// DefaultOptions are the options fit.json was made with.
var DefaultOptions = Options{Quantiles: [2]float64{0.05, 0.95}, Folds: 5, Lambda: 0.1, MinGroup: 2, Shrink: 0.5, ConfigShrink: 1, Huber: true,
	Extra: []string{"sku", "entry"}, CPUWeight: true, FamilyShrink: 2, HeavyMemory: 2}

// Validate rejects results that cannot be fitted.
func (r Result) Validate() error {
	n := Node{CPU: r.CPU, Sockets: r.Sockets, Threads: r.Threads, MemoryGiB: r.MemoryGiB}
	if err := n.Validate(); err != nil {
		return err
	}
	if !finite(r.TDP) || r.TDP < 0 || r.TDP > 2000 {
		return fmt.Errorf("%w: TDP %v W", ErrInput, r.TDP)
	}
	for l, w := range r.Watts {
		if !finite(w) || w <= 0 || w > 100000 {
			return fmt.Errorf("%w: %v W at %v%%", ErrInput, w, Levels[l])
		}
	}
	return nil
}

// Train fits the whole-server curves on results (all of which it uses:
// leave the held-out split out before). Every result must have a memory
// size.
func Train(results []Result, opt Options) (Fit, error) {
	archs, err := parseArchs(archsJSON)
	if err != nil {
		return Fit{}, err
	}
	if len(results) < 20 {
		return Fit{}, fmt.Errorf("curves: %d results: too few to fit", len(results))
	}
	if opt.bad() {
		return Fit{}, fmt.Errorf("curves: bad options %+v", opt)
	}
	f := Fit{Quantile: opt.Quantiles, Fitted: len(results), CPUs: map[string]CPUSpec{}, TDPPerThread: map[string]float64{}, HeavyMemory: opt.HeavyMemory, FittedDigest: IDDigest(results)}

	ins := make([]inputs, len(results))
	groupCount := map[string]int{}
	tdps := map[string][]float64{}
	perThread := map[string][]float64{}
	for i, r := range results {
		if err := r.Validate(); err != nil {
			return Fit{}, fmt.Errorf("curves: result %s: %w", r.ID, err)
		}
		if r.MemoryGiB == 0 {
			return Fit{}, fmt.Errorf("curves: result %s: no memory size", r.ID)
		}
		key := Normalize(r.CPU)
		in := inputs{key: key, vendor: Vendor(key), threads: float64(r.Threads), sockets: float64(r.Sockets), memG: r.MemoryGiB, memGiven: true}
		if a, ok := archs.lookupArch(key); ok {
			in.group = a.Group
			groupCount[a.Group]++
		}
		if r.TDP > 0 {
			in.tdp = r.TDP * float64(r.Sockets)
			tdps[key] = append(tdps[key], r.TDP)
			pt := in.tdp / in.threads
			perThread[in.group] = append(perThread[in.group], pt)
			if in.group != "" {
				perThread[""] = append(perThread[""], pt)
			}
		}
		ins[i] = in
	}
	for key, v := range tdps {
		a, _ := archs.lookupArch(key)
		f.CPUs[key] = CPUSpec{TDP: median(v), Group: a.Group}
	}
	for g, v := range perThread {
		f.TDPPerThread[g] = median(v)
	}

	for g, n := range groupCount {
		if n >= opt.MinGroup {
			f.Groups = append(f.Groups, g)
		}
	}
	sort.Strings(f.Groups)

	// Memory from threads, for nodes that do not say.
	var lx, ly []float64
	for _, in := range ins {
		lx, ly = append(lx, math.Log(in.threads)), append(ly, math.Log(in.memG))
	}
	f.Memory[0], f.Memory[1] = stat.LinearRegression(lx, ly, nil, false)

	f.Shape = fitShape(results)

	base := append([]string{"const", "log_threads", "log_sockets", "log_memory", "vendor:amd", "low_power", "desktop"}, opt.Extra...)
	var arch []string
	for _, g := range f.Groups {
		arch = append(arch, "arch:"+g)
	}
	specs := []struct {
		name  string
		feats []string
		use   func(inputs) bool
	}{
		{TierCPU, append(append([]string{"log_tdp"}, base...), arch...), func(in inputs) bool { return in.tdp > 0 }},
		{TierArch, append(append([]string{}, base...), arch...), func(inputs) bool { return true }},
		{TierGeneric, base, func(inputs) bool { return true }},
	}
	for _, s := range specs {
		var rs []Result
		var is []inputs
		for i, in := range ins {
			if s.use(in) {
				rs, is = append(rs, results[i]), append(is, in)
			}
		}
		o := opt
		switch s.name {
		case TierArch:
			o.Shrink, o.ConfigShrink = opt.FamilyShrink, 0
		case TierGeneric:
			o.Shrink = 0
		}
		t, err := trainTier(s.name, s.feats, rs, is, o, f.Memory)
		if err != nil {
			return Fit{}, err
		}
		f.Tiers = append(f.Tiers, t)
	}
	return f, nil
}

// bad says whether opt cannot train a fit: fewer than two folds,
// quantiles not ordered inside (0, 1), a negative ridge penalty, or a
// heavy-memory threshold not finite or negative.
func (opt Options) bad() bool {
	return opt.Folds < 2 || opt.Quantiles[0] <= 0 || opt.Quantiles[1] >= 1 || opt.Quantiles[0] >= opt.Quantiles[1] || opt.Lambda < 0 || !finite(opt.HeavyMemory) || opt.HeavyMemory < 0
}

// fitShape is the median of power/power-at-100% at each level, at most 1
// and never below the level under it.
func fitShape(results []Result) [NumLevels]float64 {
	var shape [NumLevels]float64
	for l := 0; l < NumLevels; l++ {
		ratios := make([]float64, len(results))
		for i, r := range results {
			ratios[i] = r.Watts[l] / r.Watts[NumLevels-1]
		}
		shape[l] = math.Min(median(ratios), 1)
		if l > 0 {
			shape[l] = math.Max(shape[l], shape[l-1])
		}
	}
	return shape
}

// trainTier fits one tier on every result and takes its band from
// Folds-fold cross-validation residuals, so the band reflects error on
// results the coefficients did not see.
func trainTier(name string, feats []string, rs []Result, ins []inputs, opt Options, memory [2]float64) (Tier, error) {
	t := Tier{Name: name, Features: feats}
	if opt.CPUWeight && name != TierCPU {
		n := map[string]float64{}
		for _, in := range ins {
			n[in.key]++
		}
		opt.weights = make([]float64, len(ins))
		for i, in := range ins {
			opt.weights[i] = 1 / n[in.key]
		}
	}
	fold := func(id string) int {
		h := fnv.New32a()
		_, _ = h.Write([]byte("fold/" + id))
		return int(h.Sum32() % uint32(opt.Folds))
	}
	var resByLevel [NumLevels][]float64
	var heavyByLevel [NumLevels][]bool
	for l := 0; l < NumLevels; l++ {
		beta, err := ridge(feats, rs, ins, l, opt, func(int) bool { return true })
		if err != nil {
			return t, fmt.Errorf("curves: tier %s level %v: %w", name, Levels[l], err)
		}
		t.Coef[l] = beta
		if opt.Shrink > 0 {
			cpu, cfg := offsets(name, beta, feats, rs, ins, l, opt, func(int) bool { return true })
			for key, off := range cpu {
				if t.Offsets == nil {
					t.Offsets = map[string]*[NumLevels]float64{}
				}
				if t.Offsets[key] == nil {
					t.Offsets[key] = new([NumLevels]float64)
				}
				t.Offsets[key][l] = off
			}
			for i, in := range ins {
				off, ok := cfg[configKey(in)]
				if !ok {
					continue
				}
				delete(cfg, configKey(in))
				j := sort.Search(len(t.Configs), func(j int) bool { return t.Configs[j].key() >= configKey(in) })
				if j == len(t.Configs) || t.Configs[j].key() != configKey(in) {
					t.Configs = append(t.Configs, ConfigOffset{})
					copy(t.Configs[j+1:], t.Configs[j:])
					t.Configs[j] = ConfigOffset{CPU: in.key, Sockets: rs[i].Sockets, Threads: rs[i].Threads, MemoryGiB: in.memG}
				}
				t.Configs[j].Offset[l] = off
			}
		}
		var res, resNoMem []float64
		var heavy []bool
		for k := 0; k < opt.Folds; k++ {
			in := func(i int) bool { return fold(rs[i].ID) != k }
			b, err := ridge(feats, rs, ins, l, opt, in)
			if err != nil {
				return t, fmt.Errorf("curves: tier %s level %v fold %d: %w", name, Levels[l], k, err)
			}
			var cpu, cfg map[string]float64
			if opt.Shrink > 0 {
				cpu, cfg = offsets(name, b, feats, rs, ins, l, opt, in)
			}
			for i := range rs {
				if !in(i) {
					res = append(res, math.Log(rs[i].Watts[l])-dot(b, feats, ins[i])-cpu[offsetKey(name, ins[i])]-cfg[configKey(ins[i])])
					heavy = append(heavy, memoryHeavy(ins[i], opt.HeavyMemory))
					// The same result as a node that does not say its
					// memory: imputed, and no configuration offset.
					nm := ins[i]
					nm.memG = math.Exp(memory[0] + memory[1]*math.Log(nm.threads))
					resNoMem = append(resNoMem, math.Log(rs[i].Watts[l])-dot(b, feats, nm)-cpu[offsetKey(name, nm)])
				}
			}
		}
		t.CV = append(t.CV, res...)
		resByLevel[l], heavyByLevel[l] = res, heavy
		sort.Float64s(resNoMem)
		t.LowNoMem[l] = math.Min(stat.Quantile(opt.Quantiles[0], stat.Empirical, resNoMem, nil), 0)
		t.HighNoMem[l] = math.Max(stat.Quantile(opt.Quantiles[1], stat.Empirical, resNoMem, nil), 0)
	}
	t.bands(resByLevel, heavyByLevel, opt)
	return t, nil
}

// memoryHeavy tells whether a node that gave its memory has at least
// perThread GiB per hardware thread (never when perThread is 0).
func memoryHeavy(in inputs, perThread float64) bool {
	return perThread > 0 && in.memGiven && in.memG/in.threads >= perThread
}

// bands sets the tier's band from the cross-validated log residuals at
// each level. Memory-heavy nodes miss about twice as far as the rest
// (docs/performance.md), so with Options.HeavyMemory and enough of them
// (MinHeavyResults) the rest get the quantiles of their own residuals at
// each level and the heavy ones that band scaled by the ratio of the two
// classes' quantiles over all levels (too few heavy results per level
// for quantiles of their own). Otherwise every node gets the quantiles
// of all residuals.
func (t *Tier) bands(res [NumLevels][]float64, heavy [NumLevels][]bool, opt Options) {
	q := func(p float64, v []float64) float64 {
		s := append([]float64(nil), v...)
		sort.Float64s(s)
		return stat.Quantile(p, stat.Empirical, s, nil)
	}
	var light, heavyAll []float64
	for l := range res {
		for i, r := range res[l] {
			if heavy[l][i] {
				heavyAll = append(heavyAll, r)
			} else {
				light = append(light, r)
			}
		}
	}
	split := opt.HeavyMemory > 0 && len(heavyAll)/NumLevels >= MinHeavyResults && len(light) > 0
	scaleLo, scaleHi := 1.0, 1.0
	if split {
		scaleLo = q(opt.Quantiles[0], heavyAll) / q(opt.Quantiles[0], light)
		scaleHi = q(opt.Quantiles[1], heavyAll) / q(opt.Quantiles[1], light)
		if !finite(scaleLo) || scaleLo <= 0 || !finite(scaleHi) || scaleHi <= 0 {
			split, scaleLo, scaleHi = false, 1, 1
		}
	}
	for l := range res {
		keep := res[l]
		if split {
			keep = nil
			for i, r := range res[l] {
				if !heavy[l][i] {
					keep = append(keep, r)
				}
			}
		}
		t.Low[l] = math.Min(q(opt.Quantiles[0], keep), 0)
		t.High[l] = math.Max(q(opt.Quantiles[1], keep), 0)
		t.LowHeavy[l], t.HighHeavy[l] = t.Low[l]*scaleLo, t.High[l]*scaleHi
	}
}

// MinHeavyResults is how many memory-heavy results a tier needs for a
// band of their own.
const MinHeavyResults = 20

// offsets are each CPU's mean residual over the results use keeps, shrunk
// toward zero (sum/(n+Shrink)), and then each configuration's (CPU,
// sockets, threads, memory) mean residual after its CPU's offset, shrunk
// by ConfigShrink (none when it is 0): results of the same server
// configuration, submitted by several vendors, share much of their error.
func offsets(tier string, beta []float64, feats []string, rs []Result, ins []inputs, l int, opt Options, use func(int) bool) (cpu, cfg map[string]float64) {
	mean := func(key func(i int) string, resid func(i int) float64, shrink float64) map[string]float64 {
		sum, n := map[string]float64{}, map[string]float64{}
		for i := range rs {
			if use(i) {
				sum[key(i)] += resid(i)
				n[key(i)]++
			}
		}
		out := make(map[string]float64, len(sum))
		for k, s := range sum {
			out[k] = s / (n[k] + shrink)
		}
		return out
	}
	base := func(i int) float64 { return math.Log(rs[i].Watts[l]) - dot(beta, feats, ins[i]) }
	cpu = mean(func(i int) string { return offsetKey(tier, ins[i]) }, base, opt.Shrink)
	delete(cpu, "")
	if opt.ConfigShrink <= 0 {
		return cpu, nil
	}
	cfg = mean(func(i int) string { return configKey(ins[i]) }, func(i int) float64 { return base(i) - cpu[offsetKey(tier, ins[i])] }, opt.ConfigShrink)
	return cpu, cfg
}

// offsetKey is what a tier's offsets are keyed by: the CPU in the cpu
// tier, its family in the arch tier ("" none).
func offsetKey(tier string, in inputs) string {
	if tier == TierArch {
		return Family(in.key)
	}
	return in.key
}

func configKey(in inputs) string {
	return fmt.Sprintf("%s|%g|%g|%g", in.key, in.sockets, in.threads, in.memG)
}

func dot(beta []float64, feats []string, in inputs) float64 {
	y := 0.0
	for i, f := range feats {
		y += beta[i] * feature(f, in)
	}
	return y
}

// ridge solves (XᵀX + λD)β = Xᵀy for log watts at level l over the results
// use keeps; D penalises every coefficient but the intercept.
func ridge(feats []string, rs []Result, ins []inputs, l int, opt Options, use func(int) bool) ([]float64, error) {
	beta, err := weightedRidge(feats, rs, ins, l, opt.Lambda, use, opt.weights)
	if err != nil || !opt.Huber {
		return beta, err
	}
	w := make([]float64, len(rs))
	for it := 0; it < 10; it++ {
		var abs []float64
		for i := range rs {
			if use(i) {
				abs = append(abs, math.Abs(math.Log(rs[i].Watts[l])-dot(beta, feats, ins[i])))
			}
		}
		scale := median(abs) / 0.6745
		if scale == 0 {
			return beta, nil
		}
		for i := range rs {
			r := math.Abs(math.Log(rs[i].Watts[l]) - dot(beta, feats, ins[i]))
			w[i] = math.Min(1, 1.345*scale/math.Max(r, 1e-12))
			if opt.weights != nil {
				w[i] *= opt.weights[i]
			}
		}
		next, err := weightedRidge(feats, rs, ins, l, opt.Lambda, use, w)
		if err != nil {
			return nil, err
		}
		moved := 0.0
		for j := range next {
			moved = math.Max(moved, math.Abs(next[j]-beta[j]))
		}
		beta = next
		if moved < 1e-4 {
			break
		}
	}
	return beta, nil
}

// weightedRidge is one weighted solve; nil weights are all 1.
func weightedRidge(feats []string, rs []Result, ins []inputs, l int, lambda float64, use func(int) bool, w []float64) ([]float64, error) {
	var rows []int
	for i := range rs {
		if use(i) {
			rows = append(rows, i)
		}
	}
	p := len(feats)
	if len(rows) <= p {
		return nil, fmt.Errorf("%d results for %d features", len(rows), p)
	}
	x := mat.NewDense(len(rows), p, nil)
	y := mat.NewVecDense(len(rows), nil)
	for r, i := range rows {
		sw := 1.0
		if w != nil {
			sw = math.Sqrt(w[i])
		}
		for j, f := range feats {
			x.Set(r, j, sw*feature(f, ins[i]))
		}
		y.SetVec(r, sw*math.Log(rs[i].Watts[l]))
	}
	var xtx mat.Dense
	xtx.Mul(x.T(), x)
	for j, f := range feats {
		if f != "const" {
			xtx.Set(j, j, xtx.At(j, j)+lambda)
		}
	}
	var xty mat.VecDense
	xty.MulVec(x.T(), y)
	var beta mat.VecDense
	if err := beta.SolveVec(&xtx, &xty); err != nil {
		var c mat.Condition
		if !errors.As(err, &c) {
			return nil, err
		}
	}
	out := make([]float64, p)
	for j := range out {
		out[j] = beta.AtVec(j)
		if !finite(out[j]) {
			return nil, fmt.Errorf("coefficient %s not finite", feats[j])
		}
	}
	return out, nil
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return stat.Quantile(0.5, stat.LinInterp, s, nil)
}
