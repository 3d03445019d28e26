package power

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/decimal"
	"github.com/wattrace/wattrace/internal/sourcehealth"
	"github.com/wattrace/wattrace/pkg/reading"
)

// RAPL reads the kernel's powercap interface to Intel/AMD RAPL energy
// counters (<sysfs>/class/powercap/intel-rapl:*). It is safe for
// concurrent use.
//
// Every energy_uj reading passes reading.Counter: a wraparound is accepted
// only from near the top of max_energy_range_uj to near the bottom at a
// plausible rate, so at most one wrap between Reads is assumed: a package
// counter with max_energy_range_uj ≈ 262 kJ wraps in about 17 minutes at
// 250 W, so callers must Read well within that (every few seconds in
// practice). A step back or a jump faster than the zone's ceiling
// (MeterOptions.MaxWatts) is rejected, counted in Health and logged.
type RAPL struct {
	// readFile is os.ReadFile in production; tests swap it to simulate
	// errors (EACCES) that cannot be produced as root.
	readFile func(string) ([]byte, error)

	now  func() time.Time
	tall *sourcehealth.Tally

	mu       sync.Mutex
	counters []*raplCounter // sorted by socket, then zone
	// Dropped lists the zones left out at discovery and why (an
	// unreadable counter range on one sub-zone drops only that one).
	dropped []string
}

// raplCounter is one energy_uj file. Several counters can feed one
// ZoneSample: multi-die parts expose "package-0-die-0" and
// "package-0-die-1", which together are socket 0's package energy.
type raplCounter struct {
	zone       string
	socket     int
	energyPath string
	maxUJ      uint64 // max_energy_range_uj: the counter wraps past this; 0 = treated as non-wrapping

	ctr     reading.Counter // validates each raw reading (wraps, resets, glitches, ceiling)
	totalUJ float64         // cumulative accepted energy since the first Read
}

// NewRAPL discovers the RAPL zones under sysfsRoot (normally "/sys"). It
// reads zone names and counter ranges, but not the energy counters: call
// Read once at start-up to set the baseline and to surface permission
// problems early. It fails when no zone is found (VMs, unsupported CPUs,
// intel_rapl_msr not loaded).
//
// NewRAPL validates wraps, steps back and the counter range, but applies no
// power ceiling: it suits callers that read on a clock of their own (a
// simulated one in tests). The exporter opens RAPL with NewRAPLWith (via
// discover.Open), which applies the per-zone ceilings against the real
// clock.
func NewRAPL(sysfsRoot string) (*RAPL, error) {
	r, err := newRAPL(sysfsRoot, os.ReadFile, MeterOptions{})
	if err != nil {
		return nil, err
	}
	for _, c := range r.counters {
		c.ctr.MaxRate = 0
	}
	return r, nil
}

// NewRAPLWith is NewRAPL with a logger, per-zone power ceilings and a
// clock.
func NewRAPLWith(sysfsRoot string, o MeterOptions) (*RAPL, error) {
	return newRAPL(sysfsRoot, os.ReadFile, o)
}

func newRAPL(sysfsRoot string, readFile func(string) ([]byte, error), o MeterOptions) (*RAPL, error) {
	dir := filepath.Join(sysfsRoot, "class", "powercap")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read %s (no powercap interface: VM, or intel_rapl_msr not loaded?): %w", dir, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	// AMD CPUs are served by the same intel_rapl_msr driver and appear as
	// intel-rapl:*. amd-rapl:* is accepted for kernels that name it so, but
	// only when no intel-rapl zone exists, so one socket's counter can never
	// be summed twice. intel-rapl-mmio:* is never used: on client parts it
	// is a second (MMIO) window onto the same package energy counter, and
	// reading both would double the package figure.
	for _, prefix := range []string{"intel-rapl:", "amd-rapl:"} {
		counters, dropped, err := discoverZones(dir, names, prefix, readFile)
		if err != nil {
			return nil, err
		}
		if len(counters) > 0 {
			r := &RAPL{readFile: readFile, counters: counters, dropped: dropped, now: o.now(), tall: sourcehealth.New("rapl", sourcehealth.Options{Log: o.Log, Now: o.now()})}
			for _, c := range counters {
				c.ctr = reading.Counter{Max: float64(c.maxUJ), MaxRate: o.MaxWatts.For(c.zone) * 1e6}
			}
			for _, d := range dropped {
				o.logger().Warn("RAPL zone left out", zap.String("source", "rapl"), zap.String("reason", d))
			}
			return r, nil
		}
		if len(dropped) > 0 {
			return nil, fmt.Errorf("%s: every RAPL zone was left out: %s", dir, strings.Join(dropped, "; "))
		}
	}
	return nil, fmt.Errorf("%s: no RAPL zones (intel-rapl:N or amd-rapl:N named package-N or psys): the CPU or VM exposes no RAPL, or intel_rapl_msr is not loaded", dir)
}

// discoverZones turns the <prefix>N and <prefix>N:M directories among names
// into counters. Top-level zones must be package-N (or package-N-die-M) or
// psys; sub-zones core, uncore and dram inherit their parent package's
// socket. Anything else is ignored rather than guessed at.
func discoverZones(dir string, names []string, prefix string, readFile func(string) ([]byte, error)) (counters []*raplCounter, dropped []string, err error) {
	type sub struct {
		dir    string
		parent int
	}
	var subs []sub
	packageSocket := make(map[int]int) // top-level index -> socket from its name

	for _, n := range names {
		rest, ok := strings.CutPrefix(n, prefix)
		if !ok {
			continue
		}
		idx := strings.Split(rest, ":")
		top, err := strconv.Atoi(idx[0])
		if err != nil || len(idx) > 2 {
			continue
		}
		zdir := filepath.Join(dir, n)
		if len(idx) == 2 {
			subs = append(subs, sub{dir: zdir, parent: top})
			continue
		}
		name, err := readZoneName(zdir, readFile)
		if err != nil {
			return nil, nil, err
		}
		zone, socket, ok := parseTopZoneName(name)
		if !ok {
			continue
		}
		if zone == reading.ZonePackage {
			packageSocket[top] = socket
		}
		c, err := newCounter(zdir, zone, socket, readFile)
		if err != nil {
			return nil, nil, err
		}
		counters = append(counters, c)
	}

	for _, s := range subs {
		socket, ok := packageSocket[s.parent]
		if !ok {
			continue // child of psys or of an unrecognised zone
		}
		name, err := readZoneName(s.dir, readFile)
		if err != nil {
			// One broken sub-zone must not cost the packages.
			dropped = append(dropped, err.Error())
			continue
		}
		switch name {
		case reading.ZoneCore, reading.ZoneUncore, reading.ZoneDRAM:
		default:
			continue
		}
		c, err := newCounter(s.dir, name, socket, readFile)
		if err != nil {
			dropped = append(dropped, err.Error())
			continue
		}
		counters = append(counters, c)
	}

	sort.SliceStable(counters, func(i, j int) bool {
		a, b := counters[i], counters[j]
		if a.socket != b.socket {
			return a.socket < b.socket
		}
		if zoneRank(a.zone) != zoneRank(b.zone) {
			return zoneRank(a.zone) < zoneRank(b.zone)
		}
		return a.energyPath < b.energyPath
	})
	return counters, dropped, nil
}

// parseTopZoneName maps a top-level zone's name file to (zone, socket).
// The socket comes from the name, not the directory index: the two differ
// when sockets are offline or dies are enumerated separately.
func parseTopZoneName(name string) (zone string, socket int, ok bool) {
	if name == reading.ZonePsys {
		return reading.ZonePsys, -1, true
	}
	rest, ok := strings.CutPrefix(name, "package-")
	if !ok {
		return "", 0, false
	}
	rest, _, _ = strings.Cut(rest, "-die-")
	socket, err := strconv.Atoi(rest)
	if err != nil || socket < 0 {
		return "", 0, false
	}
	return reading.ZonePackage, socket, true
}

func zoneRank(zone string) int {
	switch zone {
	case reading.ZonePackage:
		return 0
	case reading.ZoneCore:
		return 1
	case reading.ZoneUncore:
		return 2
	case reading.ZoneDRAM:
		return 3
	default:
		return 4
	}
}

func readZoneName(zdir string, readFile func(string) ([]byte, error)) (string, error) {
	path := filepath.Join(zdir, "name")
	b, err := readFile(path)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func newCounter(zdir, zone string, socket int, readFile func(string) ([]byte, error)) (*raplCounter, error) {
	path := filepath.Join(zdir, "max_energy_range_uj")
	b, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	maxUJ, err := parseUint(b)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	// A range of 0 (seen on some sub-zones) leaves the counter treated as
	// non-wrapping: a real wrap then reads as a reset, which costs one
	// interval of that zone and never credits a made-up figure.
	return &raplCounter{
		zone:       zone,
		socket:     socket,
		energyPath: filepath.Join(zdir, "energy_uj"),
		maxUJ:      maxUJ,
	}, nil
}

// Name implements Meter.
func (r *RAPL) Name() string { return "rapl" }

// Estimated implements Meter: RAPL is a measurement (of the CPU package and
// DRAM, not the whole machine).
func (r *RAPL) Estimated() bool { return false }

// Read implements Meter. Each counter's reading passes reading.Counter:
// a plausible wrap is corrected, a step back (reset, glitch) or a jump
// faster than the zone's ceiling is rejected, counted and logged, and
// never credited. A counter that cannot be read or parsed keeps its total
// and its baseline, so its next good reading accounts for the whole gap;
// the failure shows in Health. Read fails only when no counter could be
// read.
func (r *RAPL) Read(_ context.Context) ([]reading.ZoneSample, error) {
	r.mu.Lock()
	defer r.mu.Unlock()

	now := r.now()
	var errs []error
	for _, c := range r.counters {
		v, err := r.readEnergy(c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d, err := c.ctr.Observe(float64(v), now)
		if err != nil {
			r.tall.Reject(err, c.energyPath)
			continue
		}
		c.totalUJ += d
	}
	err := errors.Join(errs...)
	r.tall.ReadAt(err, now)
	if len(errs) == len(r.counters) {
		return nil, err
	}

	samples := make([]reading.ZoneSample, 0, len(r.counters))
	for _, c := range r.counters {
		// Counters are sorted by (socket, zone), so die counters of one
		// socket are adjacent and merge into the previous sample.
		if n := len(samples); n > 0 && samples[n-1].Zone == c.zone && samples[n-1].Socket == c.socket {
			samples[n-1].Joules += c.totalUJ / 1e6
			continue
		}
		samples = append(samples, reading.ZoneSample{Zone: c.zone, Socket: c.socket, Joules: c.totalUJ / 1e6})
	}
	return samples, nil
}

// Health implements HealthReporter.
func (r *RAPL) Health() []reading.SourceHealth { return []reading.SourceHealth{r.tall.Health()} }

// Dropped lists the zones left out at discovery, with the reason.
func (r *RAPL) Dropped() []string { return append([]string(nil), r.dropped...) }

func (r *RAPL) readEnergy(c *raplCounter) (uint64, error) {
	b, err := r.readFile(c.energyPath)
	if errors.Is(err, fs.ErrPermission) { // EACCES and EPERM both match
		return 0, fmt.Errorf("read %s: %w: RAPL energy counters are readable only by root since Linux 5.10 "+
			"(CVE-2020-8694, PLATYPUS); run wattrace as root, give it CAP_DAC_READ_SEARCH, "+
			"or make it group-readable with a udev rule (sysfs takes no ACLs), e.g. "+
			"SUBSYSTEM==\"powercap\", RUN+=\"/bin/chgrp wattrace %s\", RUN+=\"/bin/chmod g+r %s\"",
			c.energyPath, err, c.energyPath, c.energyPath)
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", c.energyPath, err)
	}
	v, err := parseUint(b)
	if err != nil {
		// Garbage in the file is a rejected reading, not only an error.
		r.tall.Reject(reading.Reject(reading.Unreadable, math.NaN(), "%s: %v", c.energyPath, err), c.energyPath)
		return 0, fmt.Errorf("parse %s: %w", c.energyPath, err)
	}
	return v, nil
}

// parseUint parses a sysfs file holding one unsigned decimal (powercap's
// energy_uj and max_energy_range_uj, hwmon's sensors) followed by the
// kernel's newline, through the module's one parser (internal/decimal),
// and says what it found when that is not a number.
func parseUint(b []byte) (uint64, error) {
	b = bytes.TrimSpace(b)
	v, ok := decimal.Parse(b)
	if !ok {
		return 0, fmt.Errorf("invalid value %q: not an unsigned 64-bit integer", truncate(string(b)))
	}
	return v, nil
}

// ReadWithin implements power.ReadWithin: half the time the fastest
// wrapping counter takes to run through its range at its zone's ceiling
// (MeterOptions.MaxWatts, the built-in ceilings when none is applied), so
// at most one wrap can fall between two reads. A package counter of
// 262 kJ at a 1 kW ceiling gives 131 s; 0 when no counter wraps.
func (r *RAPL) ReadWithin() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var least time.Duration
	for _, c := range r.counters {
		if c.maxUJ == 0 {
			continue
		}
		rate := c.ctr.MaxRate // µJ/s
		if rate <= 0 {
			rate = MaxWatts(nil).For(c.zone) * 1e6
		}
		d := time.Duration(float64(c.maxUJ) / rate / 2 * float64(time.Second))
		if least == 0 || d < least {
			least = d
		}
	}
	return least
}
