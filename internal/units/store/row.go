package store

import (
	"database/sql"
	"fmt"
	"maps"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/wattrace/wattrace/pkg/units"
)

// unitColumns are the units table's columns in the order row.scan reads.
const unitColumns = `ref, cluster, kind, unit_id, name, usr, grp, project, part, nodes, state,
	submit_ms, start_ms, end_ms, alloc_cpus, alloc_mem, alloc_gpus, exit_code, status, updated_ms,
	meta, first_ms, last_ms, cpu_s, io_read, io_write, net_sent, net_recv, energy, emissions, gpu_idle_s`

// row is one units row.
type row struct {
	ref                                                 int64
	cluster, kind, id                                   string
	name, user, group, project, partition, nodes, state string
	submit, start, end                                  int64
	allocCPUs, allocMem, allocGPUs                      int64
	exit                                                sql.NullInt64
	status                                              string
	updated                                             int64
	meta                                                string
	first, last                                         int64
	cpu, ioRead, ioWrite, netSent, netRecv              float64
	energy                                              map[zoneMethod]float64
	emissions                                           map[zoneProvider]float64
	// gpuIdle: seconds the unit held GPUs idle (summed over devices).
	gpuIdle float64
}

type zoneMethod struct{ zone, method string }
type zoneProvider struct{ zone, provider string }

type scanner interface{ Scan(...any) error }

func scanRow(sc scanner) (*row, error) {
	r := &row{}
	var energy, emissions string
	err := sc.Scan(&r.ref, &r.cluster, &r.kind, &r.id, &r.name, &r.user, &r.group, &r.project, &r.partition,
		&r.nodes, &r.state, &r.submit, &r.start, &r.end, &r.allocCPUs, &r.allocMem, &r.allocGPUs, &r.exit,
		&r.status, &r.updated, &r.meta, &r.first, &r.last, &r.cpu, &r.ioRead, &r.ioWrite, &r.netSent,
		&r.netRecv, &energy, &emissions, &r.gpuIdle)
	if err != nil {
		return nil, err
	}
	if r.energy, err = decodeEnergy(energy); err != nil {
		return nil, fmt.Errorf("unit %s/%s/%s energy: %w", r.cluster, r.kind, r.id, err)
	}
	if r.emissions, err = decodeEmissions(emissions); err != nil {
		return nil, fmt.Errorf("unit %s/%s/%s emissions: %w", r.cluster, r.kind, r.id, err)
	}
	return r, nil
}

// args are the values of unitColumns after ref, for INSERT and UPDATE.
func (r *row) args() []any {
	return []any{r.cluster, r.kind, r.id, r.name, r.user, r.group, r.project, r.partition, r.nodes, r.state,
		r.submit, r.start, r.end, r.allocCPUs, r.allocMem, r.allocGPUs, r.exit, r.status, r.updated,
		r.meta, r.first, r.last, r.cpu, r.ioRead, r.ioWrite, r.netSent, r.netRecv,
		encodeEnergy(r.energy), encodeEmissions(r.emissions), r.gpuIdle}
}

// unit converts the row to the API's Unit.
func (r *row) unit() units.Unit {
	u := units.Unit{
		Cluster: r.cluster, Kind: units.Kind(r.kind), ID: r.id, Name: r.name, User: r.user,
		Group: r.group, Project: r.project, Partition: r.partition, State: r.state,
		Submit: msTime(r.submit), Start: msTime(r.start), End: msTime(r.end),
		Allocation: units.Allocation{CPUs: int(r.allocCPUs), MemoryBytes: r.allocMem, GPUs: int(r.allocGPUs)},
		Status:     units.Status(r.status), Updated: msTime(r.updated),
	}
	if r.nodes != "" {
		u.Nodes = strings.Split(r.nodes, ",")
	}
	if r.exit.Valid {
		e := int(r.exit.Int64)
		u.ExitCode = &e
	}
	u.Figures = r.figures()
	u.Figures.GPUSeconds = float64(r.allocGPUs) * r.wallSeconds()
	return u
}

func (r *row) figures() units.Figures {
	f := units.Figures{CPUSeconds: r.cpu, IOReadBytes: r.ioRead, IOWriteBytes: r.ioWrite,
		NetSentBytes: r.netSent, NetReceivedBytes: r.netRecv, GPUIdleSeconds: r.gpuIdle}
	f.Energy = energyList(r.energy)
	f.Emissions = emissionList(r.emissions)
	return f
}

func energyList(m map[zoneMethod]float64) []units.ZoneEnergy {
	out := make([]units.ZoneEnergy, 0, len(m))
	for k, v := range m {
		out = append(out, units.ZoneEnergy{Zone: k.zone, Method: k.method, Joules: v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Zone != out[j].Zone {
			return out[i].Zone < out[j].Zone
		}
		return out[i].Method < out[j].Method
	})
	if len(out) == 0 {
		return nil
	}
	return out
}

func emissionList(m map[zoneProvider]float64) []units.Emission {
	out := make([]units.Emission, 0, len(m))
	for k, v := range m {
		out = append(out, units.Emission{Zone: k.zone, Provider: k.provider, Grams: v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Provider != out[j].Provider {
			return out[i].Provider < out[j].Provider
		}
		return out[i].Zone < out[j].Zone
	})
	if len(out) == 0 {
		return nil
	}
	return out
}

// addFigures adds f to the row's figures.
func (r *row) addFigures(f units.Figures) {
	r.cpu += f.CPUSeconds
	r.ioRead += f.IOReadBytes
	r.ioWrite += f.IOWriteBytes
	r.netSent += f.NetSentBytes
	r.netRecv += f.NetReceivedBytes
	r.gpuIdle += f.GPUIdleSeconds
	if len(f.Energy) > 0 && r.energy == nil {
		r.energy = map[zoneMethod]float64{}
	}
	for _, e := range f.Energy {
		r.energy[zoneMethod{e.Zone, e.Method}] += e.Joules
	}
	if len(f.Emissions) > 0 && r.emissions == nil {
		r.emissions = map[zoneProvider]float64{}
	}
	for _, e := range f.Emissions {
		r.emissions[zoneProvider{e.Zone, e.Provider}] += e.Grams
	}
}

// wallSeconds is the unit's wall time: to its end, else to the last sample
// seen (not to now, so the figure only moves when the unit's data does).
func (r *row) wallSeconds() float64 {
	if r.start == 0 {
		return 0
	}
	end := r.end
	if end == 0 {
		end = r.last
	}
	if end <= r.start {
		return 0
	}
	return float64(end-r.start) / 1000
}

// day is the UTC day the unit counts in for usage: its start, else its
// submission, first sample or last update.
func (r *row) day() int64 {
	for _, ms := range []int64{r.start, r.submit, r.first, r.updated} {
		if ms != 0 {
			return dayOf(ms)
		}
	}
	return 0
}

// Energy and emissions are stored as one text column each, a list of
// "name|name=value" pairs separated by ';' (package|measured=1234.5;
// dram|measured=80), names %-escaped where they hold one of "%|=;". It is
// what every usage query decodes for each row it reads, and parsing it
// takes a fifth of the time encoding/json takes (BenchmarkProjectYearUsage).
// Values are written with full float64 precision.
var (
	pairEscaper   = strings.NewReplacer("%", "%25", "|", "%7C", "=", "%3D", ";", "%3B")
	pairUnescaper = strings.NewReplacer("%7C", "|", "%3D", "=", "%3B", ";", "%25", "%")
)

func encodePairs[K comparable](m map[K]float64, names func(K) (string, string)) string {
	if len(m) == 0 {
		return ""
	}
	parts := make([]string, 0, len(m))
	for k, v := range m {
		a, b := names(k)
		parts = append(parts, pairEscaper.Replace(a)+"|"+pairEscaper.Replace(b)+"="+strconv.FormatFloat(v, 'g', -1, 64))
	}
	sort.Strings(parts)
	return strings.Join(parts, ";")
}

func decodePairs[K comparable](s string, key func(a, b string) K) (map[K]float64, error) {
	if s == "" {
		return nil, nil
	}
	m := make(map[K]float64, strings.Count(s, ";")+1)
	for s != "" {
		var part string
		part, s, _ = strings.Cut(s, ";")
		names, val, ok := strings.Cut(part, "=")
		a, b, ok2 := strings.Cut(names, "|")
		if !ok || !ok2 {
			return nil, fmt.Errorf("malformed figure %q", part)
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return nil, fmt.Errorf("malformed figure %q: %w", part, err)
		}
		if strings.IndexByte(names, '%') >= 0 {
			a, b = pairUnescaper.Replace(a), pairUnescaper.Replace(b)
		}
		m[key(a, b)] += v
	}
	return m, nil
}

func encodeEnergy(m map[zoneMethod]float64) string {
	return encodePairs(m, func(k zoneMethod) (string, string) { return k.zone, k.method })
}

func encodeEmissions(m map[zoneProvider]float64) string {
	return encodePairs(m, func(k zoneProvider) (string, string) { return k.zone, k.provider })
}

func decodeEnergy(s string) (map[zoneMethod]float64, error) {
	return decodePairs(s, func(a, b string) zoneMethod { return zoneMethod{a, b} })
}

func decodeEmissions(s string) (map[zoneProvider]float64, error) {
	return decodePairs(s, func(a, b string) zoneProvider { return zoneProvider{a, b} })
}

// contribution is what one unit adds to its usage_daily row.
type contribution struct {
	key    rollupKey
	sums   [rollupSums]float64
	energy map[zoneMethod]float64
	grams  map[zoneProvider]float64
}

type rollupKey struct {
	user    string
	day     int64
	project string
	cluster string
	kind    string
}

// The scalar sums of a usage_daily row, in rollupColumns order.
const (
	sUnits = iota
	sWall
	sCPU
	sGPU
	sIORead
	sIOWrite
	sNetSent
	sNetRecv
	sWPower  // Σ cpu·(joules/wall)
	sWCPUs   // Σ cpu·(cpu/wall)
	sWEff    // Σ cpu·(cpu/wall/alloc) over units with an allocation
	sWEffCPU // Σ cpu over those units
	sGPUIdle
	rollupSums
)

const rollupColumns = "units, wall_s, cpu_s, gpu_s, io_read, io_write, net_sent, net_recv, w_power, w_cpus, w_eff, w_eff_cpu, gpu_idle_s"

func (r *row) contribution() contribution {
	c := contribution{key: rollupKey{r.user, r.day(), r.project, r.cluster, r.kind}}
	wall := r.wallSeconds()
	c.sums[sUnits] = 1
	c.sums[sWall] = wall
	c.sums[sCPU] = r.cpu
	c.sums[sGPU] = float64(r.allocGPUs) * wall
	c.sums[sIORead] = r.ioRead
	c.sums[sIOWrite] = r.ioWrite
	c.sums[sNetSent] = r.netSent
	c.sums[sNetRecv] = r.netRecv
	c.sums[sGPUIdle] = r.gpuIdle
	if wall > 0 {
		joules := r.figures().Joules()
		c.sums[sWPower] = r.cpu * joules / wall
		c.sums[sWCPUs] = r.cpu * r.cpu / wall
		if r.allocCPUs > 0 {
			c.sums[sWEff] = r.cpu * r.cpu / wall / float64(r.allocCPUs)
			c.sums[sWEffCPU] = r.cpu
		}
	}
	// Copies: the row's maps change when figures are added after this.
	c.energy = maps.Clone(r.energy)
	c.grams = maps.Clone(r.emissions)
	return c
}

// averages turns a rollup's weighted sums into the CPU-time-weighted
// averages.
func averages(s [rollupSums]float64) units.Averages {
	var a units.Averages
	if s[sCPU] > 0 {
		a.PowerWatts = s[sWPower] / s[sCPU]
		a.CPUs = s[sWCPUs] / s[sCPU]
	}
	if s[sWEffCPU] > 0 {
		a.CPUEfficiency = s[sWEff] / s[sWEffCPU]
	}
	return a
}

// clean rounds away the float residue that subtracting a contribution
// leaves (a sum that should be 0 may be 1e-13).
func clean(v float64) float64 {
	if math.Abs(v) < 1e-9 {
		return 0
	}
	return v
}
