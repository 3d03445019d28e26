package power

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wattrace/wattrace/internal/sourcehealth"
	"github.com/wattrace/wattrace/pkg/reading"
)

// PMCounters reads HPE Cray EX / XC node power management counters
// (<sysfs>/cray/pm_counters), which the node's controller measures at the
// board's power rails and the kernel exposes as energy counters in joules:
// energy (the whole node: zone platform), cpu_energy (package, node-wide),
// memory_energy (dram, node-wide) and accelN_energy (gpu, socket N).
//
// The counters update raw_scan_hz times a second (10 Hz typically). A read
// follows HPE's documented procedure: read freshness, the counters, then
// freshness again, and retry if the controller updated in between, so all
// zones come from one scan. A changed startup value means the counters
// restarted (controller reset); the meter then rebases rather than
// counting the drop.
type PMCounters struct {
	dir      string
	readFile func(string) ([]byte, error)
	files    []pmFile

	now  func() time.Time
	tall *sourcehealth.Tally

	mu      sync.Mutex
	startup string
	ctrs    []reading.Counter // one per file: validates each reading against the zone's ceiling
	totalJ  []float64
	// skip are accelerators a GPU source came to read after start
	// (SkipAccels): their counters are still read, never added to.
	skip map[int]bool
}

type pmFile struct {
	name   string // file name, e.g. "accel0_energy"
	zone   string
	socket int
	accel  int // N of accelN_energy; -1 for the other counters
}

var pmAccelRe = regexp.MustCompile(`^accel([0-9]+)_energy$`)

// NewPMCounters finds the energy counters under <sysfsRoot>/cray/pm_counters;
// o gives the logger, ceilings and clock.
func NewPMCounters(sysfsRoot string, o MeterOptions) (*PMCounters, error) {
	return newPMCounters(sysfsRoot, os.ReadFile, o)
}

func newPMCounters(sysfsRoot string, readFile func(string) ([]byte, error), o MeterOptions) (*PMCounters, error) {
	dir := filepath.Join(sysfsRoot, "cray", "pm_counters")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read %s (not an HPE Cray node?): %w", dir, err)
	}
	p := &PMCounters{dir: dir, readFile: readFile, now: o.now(), tall: sourcehealth.New("pm_counters", sourcehealth.Options{Log: o.Log, Now: o.now()})}
	for _, e := range entries {
		n := e.Name()
		switch {
		case n == "energy":
			p.files = append(p.files, pmFile{n, reading.ZonePlatform, -1, -1})
		case n == "cpu_energy":
			p.files = append(p.files, pmFile{n, reading.ZonePackage, -1, -1})
		case n == "memory_energy":
			p.files = append(p.files, pmFile{n, reading.ZoneDRAM, -1, -1})
		default:
			if m := pmAccelRe.FindStringSubmatch(n); m != nil {
				i, err := strconv.Atoi(m[1])
				if err == nil {
					p.files = append(p.files, pmFile{n, reading.ZoneGPU, i, i})
				}
			}
		}
	}
	if len(p.files) == 0 {
		return nil, fmt.Errorf("%s: no energy counters (energy, cpu_energy, memory_energy, accelN_energy)", dir)
	}
	sort.Slice(p.files, func(i, j int) bool {
		a, b := p.files[i], p.files[j]
		if pmRank(a.zone) != pmRank(b.zone) {
			return pmRank(a.zone) < pmRank(b.zone)
		}
		return a.socket < b.socket
	})
	p.ctrs = make([]reading.Counter, len(p.files))
	for i, f := range p.files {
		p.ctrs[i].MaxRate = o.MaxWatts.ceiling(f.zone, f.socket)
	}
	p.totalJ = make([]float64, len(p.files))
	return p, nil
}

func pmRank(zone string) int {
	switch zone {
	case reading.ZonePlatform:
		return 0
	case reading.ZonePackage:
		return 1
	case reading.ZoneDRAM:
		return 2
	default:
		return 3
	}
}

// Name implements Meter.
func (p *PMCounters) Name() string { return "pm_counters" }

// LeaveOutAccels drops the accelN_energy zones of the GPUs the GPU stage
// reads itself, per device (read: their accelerator numbers; accelN is
// the node's Nth GPU: HPE numbers a node's accelerators in PCI bus order,
// as NVML does, so an NVIDIA device's NVML index is its N). The zones it
// keeps are GPUs the stage cannot read, numbered from first on (the
// stage's own zones come before them: first is how many it has), in
// accelerator order. A skipped device (an NVML handle that failed) so
// neither shifts which accelerators are left out nor lets a kept zone
// take a stage zone's number. Call it before the first Read. It returns
// how many zones are left.
func (p *PMCounters) LeaveOutAccels(read map[int]bool, first int) int {
	var kept []int
	for _, f := range p.files {
		if f.zone == reading.ZoneGPU && !read[f.accel] {
			kept = append(kept, f.accel)
		}
	}
	sort.Ints(kept)
	renumber := make(map[int]int, len(kept))
	for i, n := range kept {
		renumber[n] = first + i
	}
	var files []pmFile
	var ctrs []reading.Counter
	for i, f := range p.files {
		if f.zone == reading.ZoneGPU {
			if read[f.accel] {
				continue
			}
			f.socket = renumber[f.accel]
		}
		files, ctrs = append(files, f), append(ctrs, p.ctrs[i])
	}
	p.files, p.ctrs, p.totalJ = files, ctrs, make([]float64, len(files))
	return len(files)
}

// Accels is how many accelN_energy counters the node has.
func (p *PMCounters) Accels() int {
	n := 0
	for _, f := range p.files {
		if f.zone == reading.ZoneGPU {
			n++
		}
	}
	return n
}

// SkipAccels stops counting the accelerators in read from now on: a GPU
// source that was down at start (NVML) reads them per device now, and
// the two must not both count them. Exclusions follow the sources'
// state, not only their state at start. The counters are read at the
// switch itself, so what an accelerator used up to now stays with the
// side that counted it so far; a skipped accelerator's zone keeps its
// total, which stops growing (a reader that took a reading before the
// switch still has its energy up to the switch). One the source no
// longer reads (it went down) is counted again from its next reading on:
// the energy in between was the source's.
func (p *PMCounters) SkipAccels(read map[int]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if maps.Equal(p.skip, read) {
		return
	}
	// A failed read leaves the baselines where they were: the span up to
	// the next good reading then goes to the side counting after the
	// switch, the best that can be done without a reading.
	_, _ = p.read()
	p.skip = read
}

// GPUSockets are the sockets of the GPU zones the meter reports (its
// accelerators numbered after the GPU stage's zones).
func (p *PMCounters) GPUSockets() []int {
	var out []int
	for _, f := range p.files {
		if f.zone == reading.ZoneGPU {
			out = append(out, f.socket)
		}
	}
	return out
}

// Estimated implements Meter.
func (p *PMCounters) Estimated() bool { return false }

// Read implements Meter.
func (p *PMCounters) Read(_ context.Context) ([]reading.ZoneSample, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.read()
}

func (p *PMCounters) read() ([]reading.ZoneSample, error) {
	now := p.now()
	cur, startup, err := p.consistentScan()
	p.tall.ReadAt(err, now)
	if err != nil {
		return nil, err
	}
	if p.startup != "" && startup != p.startup {
		// Counters restarted: rebase, count nothing for this interval.
		for i := range p.ctrs {
			p.ctrs[i].Reset()
		}
	}
	p.startup = startup
	out := make([]reading.ZoneSample, 0, len(p.files))
	for i, f := range p.files {
		d, err := p.ctrs[i].Observe(float64(cur[i]), now)
		if err != nil {
			p.tall.Reject(err, filepath.Join(p.dir, f.name))
		}
		if f.accel < 0 || !p.skip[f.accel] {
			// A skipped accelerator is still read, so its counter's
			// baseline stays current; its energy is the GPU source's
			// meanwhile, never added here.
			p.totalJ[i] += d
		}
		out = append(out, reading.ZoneSample{Zone: f.zone, Socket: f.socket, Joules: p.totalJ[i]})
	}
	return out, nil
}

// consistentScan reads every counter between two equal freshness values.
func (p *PMCounters) consistentScan() ([]uint64, string, error) {
	for try := 0; try < 5; try++ {
		cur, startup, consistent, err := p.scan()
		if err != nil {
			return nil, "", err
		}
		if consistent {
			return cur, startup, nil
		}
	}
	return nil, "", fmt.Errorf("%s: freshness kept changing during 5 reads", p.dir)
}

// Health implements HealthReporter.
func (p *PMCounters) Health() []reading.SourceHealth {
	return []reading.SourceHealth{p.tall.Health()}
}

// scan reads every counter between two reads of freshness.
func (p *PMCounters) scan() (cur []uint64, startup string, consistent bool, err error) {
	before, err := p.readRaw("freshness")
	if err != nil {
		return nil, "", false, err
	}
	startup, err = p.readRaw("startup")
	if err != nil {
		return nil, "", false, err
	}
	cur = make([]uint64, len(p.files))
	for i, f := range p.files {
		raw, err := p.readRaw(f.name)
		if err != nil {
			return nil, "", false, err
		}
		v, err := ParsePMValue(raw, "J")
		if err != nil {
			return nil, "", false, fmt.Errorf("parse %s: %w", filepath.Join(p.dir, f.name), err)
		}
		cur[i] = v
	}
	after, err := p.readRaw("freshness")
	if err != nil {
		return nil, "", false, err
	}
	return cur, startup, before == after, nil
}

func (p *PMCounters) readRaw(name string) (string, error) {
	path := filepath.Join(p.dir, name)
	b, err := p.readFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// ParsePMValue parses one pm_counters file: an unsigned decimal followed by
// the unit the file must carry ("123456 J", "250 W"); unit "" accepts a
// bare number (freshness, generation, startup).
func ParsePMValue(s, unit string) (uint64, error) {
	s = strings.TrimSpace(s)
	num, u, _ := strings.Cut(s, " ")
	if u = strings.TrimSpace(u); u != unit {
		return 0, fmt.Errorf("value %q: want unit %q", truncate(s), unit)
	}
	v, err := parseUint([]byte(num))
	if err != nil {
		return 0, fmt.Errorf("value %q: %w", truncate(s), err)
	}
	return v, nil
}
