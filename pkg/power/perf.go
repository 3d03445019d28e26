package power

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wattrace/wattrace/internal/cpulist"
	"github.com/wattrace/wattrace/internal/sourcehealth"
	"github.com/wattrace/wattrace/pkg/reading"
)

// PerfEvent is one RAPL event of the kernel's "power" perf PMU
// (<sysfs>/bus/event_source/devices/power/events/energy-*).
type PerfEvent struct {
	Name   string  // "energy-pkg"
	Type   uint32  // the PMU's dynamic type (devices/power/type)
	Config uint64  // from "event=0x02"
	Scale  float64 // joules per count, from <event>.scale
	Unit   string  // "Joules"
}

// perfZones maps perf RAPL events to our zone names. energy-gpu is the
// integrated GPU inside the package (powercap's PP1, "uncore"), not a
// discrete GPU.
var perfZones = map[string]string{
	"energy-pkg":   reading.ZonePackage,
	"energy-cores": reading.ZoneCore,
	"energy-gpu":   reading.ZoneUncore,
	"energy-ram":   reading.ZoneDRAM,
	"energy-psys":  reading.ZonePsys,
}

// ParsePerfPMU reads the power PMU's type and RAPL event descriptions, and
// the CPUs to open them on (devices/power/cpumask: one CPU per package).
func ParsePerfPMU(sysfsRoot string) ([]PerfEvent, []int, error) {
	dir := filepath.Join(sysfsRoot, "bus", "event_source", "devices", "power")
	tb, err := os.ReadFile(filepath.Join(dir, "type"))
	if err != nil {
		return nil, nil, fmt.Errorf("read %s (no power PMU: not Intel/AMD RAPL, a VM, or an old kernel): %w", filepath.Join(dir, "type"), err)
	}
	typ, err := strconv.ParseUint(strings.TrimSpace(string(tb)), 10, 32)
	if err != nil {
		return nil, nil, fmt.Errorf("parse %s: %w", filepath.Join(dir, "type"), err)
	}
	edir := filepath.Join(dir, "events")
	entries, err := os.ReadDir(edir)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", edir, err)
	}
	var events []PerfEvent
	for _, e := range entries {
		n := e.Name()
		if _, ok := perfZones[n]; !ok {
			continue
		}
		ev := PerfEvent{Name: n, Type: uint32(typ)}
		b, err := os.ReadFile(filepath.Join(edir, n))
		if err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", filepath.Join(edir, n), err)
		}
		if ev.Config, err = ParsePerfEventConfig(string(b)); err != nil {
			return nil, nil, fmt.Errorf("parse %s: %w", filepath.Join(edir, n), err)
		}
		b, err = os.ReadFile(filepath.Join(edir, n+".scale"))
		if err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", filepath.Join(edir, n+".scale"), err)
		}
		if ev.Scale, err = ParsePerfScale(string(b)); err != nil {
			return nil, nil, fmt.Errorf("parse %s: %w", filepath.Join(edir, n+".scale"), err)
		}
		if b, err = os.ReadFile(filepath.Join(edir, n+".unit")); err == nil {
			ev.Unit = strings.TrimSpace(string(b))
		}
		if ev.Unit != "" && ev.Unit != "Joules" {
			return nil, nil, fmt.Errorf("%s: unit %q, want Joules", filepath.Join(edir, n+".unit"), ev.Unit)
		}
		events = append(events, ev)
	}
	if len(events) == 0 {
		return nil, nil, fmt.Errorf("%s: no energy-* events", edir)
	}
	sort.Slice(events, func(i, j int) bool { return events[i].Name < events[j].Name })
	mb, err := os.ReadFile(filepath.Join(dir, "cpumask"))
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", filepath.Join(dir, "cpumask"), err)
	}
	cpus, err := ParseCPUList(string(mb))
	if err != nil {
		return nil, nil, fmt.Errorf("parse %s: %w", filepath.Join(dir, "cpumask"), err)
	}
	return events, cpus, nil
}

// ParsePerfEventConfig parses an event description such as "event=0x02"
// (terms separated by commas; only "event" is used by the power PMU).
func ParsePerfEventConfig(s string) (uint64, error) {
	for _, term := range strings.Split(strings.TrimSpace(s), ",") {
		k, v, ok := strings.Cut(term, "=")
		if !ok || strings.TrimSpace(k) != "event" {
			continue
		}
		v = strings.TrimSpace(v)
		hex, ok := strings.CutPrefix(v, "0x")
		if !ok || hex == "" {
			return 0, fmt.Errorf("event value %q: want 0x<hex>", truncate(v))
		}
		c, err := strconv.ParseUint(hex, 16, 64)
		if err != nil {
			return 0, fmt.Errorf("event value %q: %w", truncate(v), err)
		}
		return c, nil
	}
	return 0, fmt.Errorf("no event= term in %q", truncate(s))
}

// ParsePerfScale parses a .scale file: a positive, finite decimal.
func ParsePerfScale(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return 0, fmt.Errorf("scale %q: %w", truncate(s), err)
	}
	if !(v > 0) || v > 1 {
		// Joules per count is tiny (2^-32 typically); anything else is
		// not a RAPL scale.
		return 0, fmt.Errorf("scale %q: want 0 < scale <= 1", truncate(s))
	}
	return v, nil
}

// ParseCPUList parses a PMU's cpumask ("0,28-29"); unlike an online list
// it must name at least one CPU.
func ParseCPUList(s string) ([]int, error) {
	cpus, err := cpulist.Parse(s)
	if err != nil {
		return nil, err
	}
	if len(cpus) == 0 {
		return nil, errors.New("empty CPU list")
	}
	return cpus, nil
}

// PerfCounter is one open perf event: a free-running 64-bit count.
type PerfCounter interface {
	Count() (uint64, error)
	Close() error
}

// PerfOpener opens event ev on cpu (perf_event_open with pid -1).
type PerfOpener func(ev PerfEvent, cpu int) (PerfCounter, error)

// PerfRAPL reads RAPL through perf events. The kernel extends the 32-bit
// hardware counters to 64 bits, so no wraparound correction is needed:
// the unsigned difference of two reads is the count in between. Opening
// needs CAP_PERFMON (or CAP_SYS_ADMIN) or kernel.perf_event_paranoid <= 0.
type PerfRAPL struct {
	now  func() time.Time
	tall *sourcehealth.Tally

	mu       sync.Mutex
	counters []*perfRAPLCounter
}

type perfRAPLCounter struct {
	c      PerfCounter
	zone   string
	socket int
	scale  float64
	primed bool
	prev   uint64 // last raw count
	// seq is the joules counted since the first read, from differences
	// taken modulo 2^64 and read as signed (so a 2^64 wrap is a small step
	// forward and a glitch back is a step back), fed to ctr, which rejects
	// what no hardware can draw.
	seq    float64
	ctr    reading.Counter
	joules float64
}

// NewPerfRAPL opens every RAPL event of the power PMU on one CPU per
// package, with the kernel's perf_event_open; o gives the logger, ceilings
// and clock.
func NewPerfRAPL(sysfsRoot string, o MeterOptions) (*PerfRAPL, error) {
	return newPerfRAPL(sysfsRoot, openPerfCounter, o)
}

func newPerfRAPL(sysfsRoot string, open PerfOpener, o MeterOptions) (*PerfRAPL, error) {
	events, cpus, err := ParsePerfPMU(sysfsRoot)
	if err != nil {
		return nil, err
	}
	p := &PerfRAPL{now: o.now(), tall: sourcehealth.New("rapl-perf", sourcehealth.Options{Log: o.Log, Now: o.now()})}
	for _, ev := range events {
		for i, cpu := range cpus {
			zone := perfZones[ev.Name]
			socket := -1
			if zone == reading.ZonePsys {
				if i > 0 {
					break // psys is the platform's, not a package's: once
				}
			} else {
				if socket, err = cpuPackage(sysfsRoot, cpu); err != nil {
					p.Close()
					return nil, err
				}
			}
			c, err := open(ev, cpu)
			if err != nil {
				p.Close()
				return nil, fmt.Errorf("perf_event_open %s on CPU %d (needs CAP_PERFMON or kernel.perf_event_paranoid <= 0): %w", ev.Name, cpu, err)
			}
			p.counters = append(p.counters, &perfRAPLCounter{c: c, zone: zone, socket: socket, scale: ev.Scale,
				ctr: reading.Counter{MaxRate: o.MaxWatts.ceiling(zone, socket)}})
		}
	}
	sort.SliceStable(p.counters, func(i, j int) bool {
		a, b := p.counters[i], p.counters[j]
		if a.socket != b.socket {
			return a.socket < b.socket
		}
		return zoneRank(a.zone) < zoneRank(b.zone)
	})
	return p, nil
}

func cpuPackage(sysfsRoot string, cpu int) (int, error) {
	path := filepath.Join(sysfsRoot, "devices", "system", "cpu", "cpu"+strconv.Itoa(cpu), "topology", "physical_package_id")
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || v < 0 {
		return 0, fmt.Errorf("parse %s: %q is not a package id", path, truncate(string(b)))
	}
	return v, nil
}

// Name implements Meter.
func (p *PerfRAPL) Name() string { return "rapl-perf" }

// Estimated implements Meter.
func (p *PerfRAPL) Estimated() bool { return false }

// Read implements Meter. A counter that fails to read keeps its total and
// its baseline; one whose increase is implausible is rejected (counted,
// logged) and not credited. Read fails only when no counter could be read.
func (p *PerfRAPL) Read(_ context.Context) ([]reading.ZoneSample, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	var errs []error
	for _, c := range p.counters {
		v, err := c.c.Count()
		if err != nil {
			errs = append(errs, fmt.Errorf("read perf RAPL %s socket %d: %w", c.zone, c.socket, err))
			continue
		}
		if c.primed {
			c.seq += float64(int64(v-c.prev)) * c.scale
		}
		c.prev, c.primed = v, true
		d, err := c.ctr.Observe(c.seq, now)
		if err != nil {
			p.tall.Reject(err, fmt.Sprintf("%s socket %d", c.zone, c.socket))
			continue
		}
		c.joules += d
	}
	err := errors.Join(errs...)
	p.tall.ReadAt(err, now)
	if len(errs) == len(p.counters) && len(errs) > 0 {
		return nil, err
	}
	out := make([]reading.ZoneSample, len(p.counters))
	for i, c := range p.counters {
		out[i] = reading.ZoneSample{Zone: c.zone, Socket: c.socket, Joules: c.joules}
	}
	return out, nil
}

// Health implements HealthReporter.
func (p *PerfRAPL) Health() []reading.SourceHealth { return []reading.SourceHealth{p.tall.Health()} }

// Close closes the perf events.
func (p *PerfRAPL) Close() error {
	var errs []error
	for _, c := range p.counters {
		errs = append(errs, c.c.Close())
	}
	return errors.Join(errs...)
}
