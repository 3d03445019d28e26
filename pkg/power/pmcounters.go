package power

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
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

	mu      sync.Mutex
	startup string
	primed  bool
	prev    []uint64
	totalJ  []float64
}

type pmFile struct {
	name   string // file name, e.g. "accel0_energy"
	zone   string
	socket int
}

var pmAccelRe = regexp.MustCompile(`^accel([0-9]+)_energy$`)

// NewPMCounters finds the energy counters under <sysfsRoot>/cray/pm_counters.
func NewPMCounters(sysfsRoot string) (*PMCounters, error) {
	return newPMCounters(sysfsRoot, os.ReadFile)
}

func newPMCounters(sysfsRoot string, readFile func(string) ([]byte, error)) (*PMCounters, error) {
	dir := filepath.Join(sysfsRoot, "cray", "pm_counters")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read %s (not an HPE Cray node?): %w", dir, err)
	}
	p := &PMCounters{dir: dir, readFile: readFile}
	for _, e := range entries {
		n := e.Name()
		switch {
		case n == "energy":
			p.files = append(p.files, pmFile{n, ZonePlatform, -1})
		case n == "cpu_energy":
			p.files = append(p.files, pmFile{n, ZonePackage, -1})
		case n == "memory_energy":
			p.files = append(p.files, pmFile{n, ZoneDRAM, -1})
		default:
			if m := pmAccelRe.FindStringSubmatch(n); m != nil {
				i, err := strconv.Atoi(m[1])
				if err == nil {
					p.files = append(p.files, pmFile{n, ZoneGPU, i})
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
	p.prev = make([]uint64, len(p.files))
	p.totalJ = make([]float64, len(p.files))
	return p, nil
}

func pmRank(zone string) int {
	switch zone {
	case ZonePlatform:
		return 0
	case ZonePackage:
		return 1
	case ZoneDRAM:
		return 2
	default:
		return 3
	}
}

// Name implements Meter.
func (p *PMCounters) Name() string { return "pm_counters" }

// Estimated implements Meter.
func (p *PMCounters) Estimated() bool { return false }

// Read implements Meter.
func (p *PMCounters) Read() ([]ZoneSample, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var cur []uint64
	var startup string
	var err error
	for try := 0; ; try++ {
		var consistent bool
		cur, startup, consistent, err = p.scan()
		if err != nil {
			return nil, err
		}
		if consistent {
			break
		}
		if try == 4 {
			return nil, fmt.Errorf("%s: freshness kept changing during 5 reads", p.dir)
		}
	}
	if p.primed && startup != p.startup {
		p.primed = false // counters restarted: rebase, count nothing
	}
	out := make([]ZoneSample, len(p.files))
	for i, f := range p.files {
		if p.primed && cur[i] >= p.prev[i] {
			p.totalJ[i] += float64(cur[i] - p.prev[i])
		}
		p.prev[i] = cur[i]
		out[i] = ZoneSample{Zone: f.zone, Socket: f.socket, Joules: p.totalJ[i]}
	}
	p.primed, p.startup = true, startup
	return out, nil
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
