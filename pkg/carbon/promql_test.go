package carbon

import (
	"github.com/wattrace/wattrace/pkg/reading"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// dayProfile is a deterministic, realistic day on one node: a grid factor
// stepping every 15 minutes with a midday solar dip and an evening peak
// (Germany-like, 240-480 g/kWh), jobs arriving more often in working
// hours, each with its own power that changes phase every few minutes,
// and 100 W idle.
type dayProfile struct {
	factor []float64 // g/kWh in force each second
	jobs   []simJob
	node   []float64 // node watts each second (idle + jobs)
}

type simJob struct {
	start, end int       // seconds, [start, end)
	watts      []float64 // per second of its life
}

const day = 86400

func newDayProfile(seed uint64) *dayProfile {
	r := rand.New(rand.NewPCG(seed, 7))
	d := &dayProfile{factor: make([]float64, day), node: make([]float64, day)}
	for k := 0; k < 96; k++ {
		h := float64(k) / 4
		g := 380 - 140*math.Exp(-math.Pow((h-13)/3, 2)) + 90*math.Exp(-math.Pow((h-19)/2, 2)) + (r.Float64()*60 - 30)
		for s := k * 900; s < (k+1)*900; s++ {
			d.factor[s] = g
		}
	}
	for s := range d.node {
		d.node[s] = 100
	}
	for t := 0; t < day; {
		h := float64(t) / 3600
		mean := 40 * 60.0 // one job every 40 min at night
		if h >= 8 && h < 18 {
			mean = 12 * 60 // every 12 min in working hours
		}
		t += int(r.ExpFloat64() * mean)
		if t >= day {
			break
		}
		dur := 5*60 + r.IntN(175*60) // 5 min to 3 h
		end := min(t+dur, day)
		base := 50 + r.Float64()*200
		j := simJob{start: t, end: end, watts: make([]float64, end-t)}
		for s := 0; s < len(j.watts); {
			phase := 60 + r.IntN(540) // 1 to 10 min
			m := 0.2 + r.Float64()*1.3
			for e := min(s+phase, len(j.watts)); s < e; s++ {
				j.watts[s] = base * m
				d.node[t+s] += base * m
			}
		}
		d.jobs = append(d.jobs, j)
	}
	return d
}

// avgOverTime is PromQL's avg_over_time(factor[...]) over (from, to],
// with the factor scraped every 30 s.
func (d *dayProfile) avgOverTime(from, to int) float64 {
	sum, n := 0.0, 0
	for t := (from/30 + 1) * 30; t <= to && t < day; t += 30 {
		sum += d.factor[t]
		n++
	}
	if n == 0 {
		return d.factor[min(from, day-1)]
	}
	return sum / float64(n)
}

type errStats struct{ mean, p95, max float64 }

func stats(errs []float64) errStats {
	sort.Float64s(errs)
	s := 0.0
	for _, e := range errs {
		s += e
	}
	return errStats{mean: s / float64(len(errs)), p95: errs[len(errs)*95/100], max: errs[len(errs)-1]}
}

// The integrated counter against the PromQL product of averages on the
// same day. The integrated grams (each second's joules times the factor
// in force, as the stats loop's emissions stage prices them) are exact; PromQL's
//
//	increase(energy[w]) / 3.6e6 * avg_over_time(factor[w])
//
// multiplies two averages and misses the covariance of load and factor
// within w. The figures are quoted in docs/emissions.md.
func TestPromQLProductDiffers(t *testing.T) {
	d := newDayProfile(2024)
	nodeExact := 0.0
	for s := 0; s < day; s++ {
		nodeExact += reading.CarbonFactor{Provider: "rte", GramsPerKWh: d.factor[s]}.Grams(d.node[s])
	}
	var byJob, hourly, instant []float64
	for _, j := range d.jobs {
		e, exact := 0.0, 0.0
		for s, w := range j.watts {
			exact += reading.CarbonFactor{Provider: "rte", GramsPerKWh: d.factor[j.start+s]}.Grams(w)
			e += w
		}
		// Best case: the range is exactly the job's life.
		job := e / 3.6e6 * d.avgOverTime(j.start-1, j.end-1)
		byJob = append(byJob, relErr(job, exact))
		// increase(energy[life]) * factor: the factor is an instant
		// vector, the value scraped last before the job's end.
		instant = append(instant, relErr(e/3.6e6*d.factor[(j.end-1)/30*30], exact))
		// A recording rule per hour, summed over the day.
		hr := 0.0
		for h := j.start / 3600; h*3600 < j.end; h++ {
			eh := 0.0
			for s := max(j.start, h*3600); s < min(j.end, (h+1)*3600); s++ {
				eh += j.watts[s-j.start]
			}
			hr += eh / 3.6e6 * d.avgOverTime(h*3600-1, (h+1)*3600-1)
		}
		hourly = append(hourly, relErr(hr, exact))
	}
	nodeE := 0.0
	for _, w := range d.node {
		nodeE += w
	}
	nodeProm := nodeE / 3.6e6 * d.avgOverTime(-1, day-1)
	nodeDay := relErr(nodeProm, nodeExact)
	bj, hj, ij := stats(byJob), stats(hourly), stats(instant)
	lo, hi := d.factor[0], d.factor[0]
	for _, f := range d.factor {
		lo, hi = min(lo, f), max(hi, f)
	}
	t.Logf("%d jobs, node %.1f kWh, %.1f g exact, factor %.0f-%.0f g/kWh", len(d.jobs), nodeE/3.6e6, nodeExact, lo, hi)
	t.Logf("per job, range = job's life: mean %.2f%%, p95 %.2f%%, max %.2f%%", 100*bj.mean, 100*bj.p95, 100*bj.max)
	t.Logf("per job, hourly recording rule: mean %.2f%%, p95 %.2f%%, max %.2f%%", 100*hj.mean, 100*hj.p95, 100*hj.max)
	t.Logf("per job, instant factor at the end: mean %.2f%%, p95 %.2f%%, max %.2f%%", 100*ij.mean, 100*ij.p95, 100*ij.max)
	t.Logf("node, one day range: %.1f g against %.1f g exact (%+.2f%%)", nodeProm, nodeExact, 100*(nodeProm-nodeExact)/nodeExact)

	// Exactness of the integrated side, independently of Factor.Grams.
	direct := 0.0
	for s := 0; s < day; s++ {
		direct += d.node[s] * d.factor[s] / 3.6e6
	}
	if relErr(nodeExact, direct) > 1e-9 {
		t.Fatalf("integrated %.9g, direct %.9g", nodeExact, direct)
	}
	// The product of averages is not the integral: pinned so that the
	// figures in the docs stay true.
	for _, c := range []struct {
		name    string
		got, lo float64
		hi      float64
	}{
		{"job-life mean", bj.mean, 0.0050, 0.0060},
		{"job-life max", bj.max, 0.019, 0.021},
		{"hourly mean", hj.mean, 0.012, 0.014},
		{"hourly max", hj.max, 0.095, 0.105},
		{"instant mean", ij.mean, 0.070, 0.078},
		{"instant max", ij.max, 0.23, 0.25},
		{"node day", nodeDay, 0.033, 0.036},
	} {
		if c.got < c.lo || c.got > c.hi {
			t.Errorf("%s: %.4f outside [%.4f, %.4f]", c.name, c.got, c.lo, c.hi)
		}
	}
}
