package power

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// RAPL reads the kernel's powercap interface to Intel/AMD RAPL energy
// counters (<sysfs>/class/powercap/intel-rapl:*). It is safe for
// concurrent use.
//
// The counters are wraparound-corrected assuming at most one wrap between
// Reads: a package counter with max_energy_range_uj ≈ 262 kJ wraps in about
// 17 minutes at 250 W, so callers must Read well within that (every few
// seconds in practice). Several wraps between two Reads are undetectable
// from the counter alone and would be under-counted.
type RAPL struct {
	// readFile is os.ReadFile in production; tests swap it to simulate
	// errors (EACCES) that cannot be produced as root.
	readFile func(string) ([]byte, error)

	mu       sync.Mutex
	counters []*raplCounter // sorted by socket, then zone
}

// raplCounter is one energy_uj file. Several counters can feed one
// ZoneSample: multi-die parts expose "package-0-die-0" and
// "package-0-die-1", which together are socket 0's package energy.
type raplCounter struct {
	zone       string
	socket     int
	energyPath string
	maxUJ      uint64 // max_energy_range_uj: the counter wraps past this

	primed  bool   // prevUJ holds a real reading
	prevUJ  uint64 // last raw counter value
	totalUJ uint64 // cumulative energy since the first Read
}

// NewRAPL discovers the RAPL zones under sysfsRoot (normally "/sys"). It
// reads zone names and counter ranges, but not the energy counters: call
// Read once at start-up to set the baseline and to surface permission
// problems early. It fails when no zone is found (VMs, unsupported CPUs,
// intel_rapl_msr not loaded).
func NewRAPL(sysfsRoot string) (*RAPL, error) {
	return newRAPL(sysfsRoot, os.ReadFile)
}

func newRAPL(sysfsRoot string, readFile func(string) ([]byte, error)) (*RAPL, error) {
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
		counters, err := discoverZones(dir, names, prefix, readFile)
		if err != nil {
			return nil, err
		}
		if len(counters) > 0 {
			return &RAPL{readFile: readFile, counters: counters}, nil
		}
	}
	return nil, fmt.Errorf("%s: no RAPL zones (intel-rapl:N or amd-rapl:N named package-N or psys): the CPU or VM exposes no RAPL, or intel_rapl_msr is not loaded", dir)
}

// discoverZones turns the <prefix>N and <prefix>N:M directories among names
// into counters. Top-level zones must be package-N (or package-N-die-M) or
// psys; sub-zones core, uncore and dram inherit their parent package's
// socket. Anything else is ignored rather than guessed at.
func discoverZones(dir string, names []string, prefix string, readFile func(string) ([]byte, error)) ([]*raplCounter, error) {
	type sub struct {
		dir    string
		parent int
	}
	var counters []*raplCounter
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
			return nil, err
		}
		zone, socket, ok := parseTopZoneName(name)
		if !ok {
			continue
		}
		if zone == ZonePackage {
			packageSocket[top] = socket
		}
		c, err := newCounter(zdir, zone, socket, readFile)
		if err != nil {
			return nil, err
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
			return nil, err
		}
		switch name {
		case ZoneCore, ZoneUncore, ZoneDRAM:
		default:
			continue
		}
		c, err := newCounter(s.dir, name, socket, readFile)
		if err != nil {
			return nil, err
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
	return counters, nil
}

// parseTopZoneName maps a top-level zone's name file to (zone, socket).
// The socket comes from the name, not the directory index: the two differ
// when sockets are offline or dies are enumerated separately.
func parseTopZoneName(name string) (zone string, socket int, ok bool) {
	if name == ZonePsys {
		return ZonePsys, -1, true
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
	return ZonePackage, socket, true
}

func zoneRank(zone string) int {
	switch zone {
	case ZonePackage:
		return 0
	case ZoneCore:
		return 1
	case ZoneUncore:
		return 2
	case ZoneDRAM:
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
	maxUJ, err := parseEnergy(b)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", path, err)
	}
	if maxUJ == 0 {
		// Wraparound correction needs the counter's range; zero means
		// the zone cannot be corrected and its deltas would be garbage.
		return nil, fmt.Errorf("%s: max_energy_range_uj is 0", path)
	}
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

// Read implements Meter. All counters are read before any state changes,
// so a failed Read (e.g. one unreadable file) leaves the meter exactly as
// it was and the next successful Read accounts for the whole interval.
func (r *RAPL) Read() ([]ZoneSample, error) {
	r.mu.Lock()
	defer r.mu.Unlock()

	cur := make([]uint64, len(r.counters))
	for i, c := range r.counters {
		v, err := r.readEnergy(c)
		if err != nil {
			return nil, err
		}
		cur[i] = v
	}

	samples := make([]ZoneSample, 0, len(r.counters))
	var totals []uint64
	for i, c := range r.counters {
		if c.primed {
			c.totalUJ += energyDelta(c.prevUJ, cur[i], c.maxUJ)
		}
		c.prevUJ, c.primed = cur[i], true

		// Counters are sorted by (socket, zone), so die counters of one
		// socket are adjacent and merge into the previous sample.
		if n := len(samples); n > 0 && samples[n-1].Zone == c.zone && samples[n-1].Socket == c.socket {
			totals[n-1] += c.totalUJ
			continue
		}
		samples = append(samples, ZoneSample{Zone: c.zone, Socket: c.socket})
		totals = append(totals, c.totalUJ)
	}
	for i := range samples {
		samples[i].Joules = float64(totals[i]) / 1e6
	}
	return samples, nil
}

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
	v, err := parseEnergy(b)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", c.energyPath, err)
	}
	if v > c.maxUJ {
		return 0, fmt.Errorf("%s: counter %d exceeds max_energy_range_uj %d", c.energyPath, v, c.maxUJ)
	}
	return v, nil
}

// energyDelta is the energy between two readings of a counter that wraps
// past maxUJ. Exactly one wrap is assumed when cur < prev; see RAPL. (The
// hardware wraps from max to 0, so the exact figure is one energy unit,
// ~61 µJ, more; that is far below anything we report.)
func energyDelta(prev, cur, maxUJ uint64) uint64 {
	if cur >= prev {
		return cur - prev
	}
	return maxUJ - prev + cur
}

// parseEnergy parses a powercap microjoule file (energy_uj,
// max_energy_range_uj): one unsigned decimal, optionally followed by the
// kernel's newline.
func parseEnergy(b []byte) (uint64, error) {
	s := strings.TrimSpace(string(b))
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("invalid energy value %q", truncate(s))
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid energy value %q: %w", truncate(s), err)
	}
	return v, nil
}
