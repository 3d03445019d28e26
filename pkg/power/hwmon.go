package power

import (
	"context"
	"fmt"
	"github.com/wattrace/wattrace/pkg/reading"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// HwmonZones maps a hwmon chip's name file to the zone its power or energy
// sensors measure. Only listed chips are read: most hwmon power sensors
// (PSU rails, VRMs) are parts of something already counted, and guessing
// would count them twice.
type HwmonZones map[string]string

// DefaultHwmonZones: ACPI power_meter measures the whole node (often at
// the PSU input); amdgpu, i915 and xe report their own GPU's draw.
var DefaultHwmonZones = func() HwmonZones {
	return HwmonZones{"power_meter": reading.ZonePlatform, "amdgpu": reading.ZoneGPU, "i915": reading.ZoneGPU, "xe": reading.ZoneGPU}
}

// Hwmon reads power and energy sensors of hwmon chips
// (<sysfs>/class/hwmon/hwmon*/): energyN_input in microjoules is used where
// a chip has it, else powerN_input, else powerN_average (ACPI power_meter),
// both in microwatts. It is a PowerReader: wrap it with NewCached, which
// integrates the power-only chips.
//
// Chips of the platform zone share socket -1 and are summed; GPU chips are
// numbered 0, 1, … in the order of their device paths (stable across
// boots, unlike hwmonN).
type Hwmon struct {
	readFile func(string) ([]byte, error)
	chips    []hwmonChip
}

type hwmonChip struct {
	name    string
	dir     string
	zone    string
	socket  int
	energy  bool     // files are energyN_input (µJ), else power (µW)
	files   []string // sensor files summed for this chip
	devPath string
}

var (
	hwmonEnergyRe = regexp.MustCompile(`^energy[0-9]+_input$`)
	hwmonPowerRe  = regexp.MustCompile(`^power[0-9]+_input$`)
	hwmonAvgRe    = regexp.MustCompile(`^power[0-9]+_average$`)
)

// NewHwmon finds the chips under <sysfsRoot>/class/hwmon named in zones
// (DefaultHwmonZones when nil). It fails when none has a usable sensor, or
// when chips of one zone mix energy and power sensors (they could not be
// summed).
func NewHwmon(sysfsRoot string, zones HwmonZones) (*Hwmon, error) {
	return NewHwmonExcept(sysfsRoot, zones, nil, 0)
}

// NewHwmonExcept is NewHwmon leaving out the GPU chips of the devices in
// except (PCI addresses, "0000:03:00.0": the devices the GPU stage reads
// itself) and numbering the GPU chips it keeps from firstGPU, after the
// GPU stage's own zones, so no two sources share a zone identity.
func NewHwmonExcept(sysfsRoot string, zones HwmonZones, except map[string]bool, firstGPU int) (*Hwmon, error) {
	if zones == nil {
		zones = DefaultHwmonZones()
	}
	base := filepath.Join(sysfsRoot, "class", "hwmon")
	entries, err := os.ReadDir(base)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", base, err)
	}
	h := &Hwmon{readFile: os.ReadFile}
	for _, e := range entries {
		dir := filepath.Join(base, e.Name())
		nb, err := os.ReadFile(filepath.Join(dir, "name"))
		if err != nil {
			continue // a hwmon device without a name is not one we can map
		}
		name := strings.TrimSpace(string(nb))
		zone, ok := zones[name]
		if !ok {
			continue
		}
		files, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", dir, err)
		}
		var energy, power, avg []string
		for _, f := range files {
			switch n := f.Name(); {
			case hwmonEnergyRe.MatchString(n):
				energy = append(energy, n)
			case hwmonPowerRe.MatchString(n):
				power = append(power, n)
			case hwmonAvgRe.MatchString(n):
				avg = append(avg, n)
			}
		}
		c := hwmonChip{name: name, dir: dir, zone: zone}
		switch {
		case len(energy) > 0:
			// An energy counter needs no integration and misses no spike.
			c.energy, c.files = true, energy[:1]
		case len(power) > 0:
			c.files = power[:1]
		case len(avg) > 0:
			c.files = avg[:1]
		default:
			continue
		}
		// The device link names the physical device; hwmonN does not.
		if p, err := filepath.EvalSymlinks(filepath.Join(dir, "device")); err == nil {
			c.devPath = p
		} else {
			c.devPath = dir
		}
		if zone == reading.ZoneGPU && except[strings.ToLower(filepath.Base(c.devPath))] {
			continue
		}
		h.chips = append(h.chips, c)
	}
	if len(h.chips) == 0 {
		return nil, fmt.Errorf("%s: no power or energy sensor on a known chip (%s)", base, strings.Join(zones.names(), ", "))
	}
	sort.Slice(h.chips, func(i, j int) bool { return h.chips[i].devPath < h.chips[j].devPath })
	next := map[string]int{reading.ZoneGPU: firstGPU}
	kind := map[string]bool{}
	for i := range h.chips {
		c := &h.chips[i]
		if c.zone == reading.ZonePlatform {
			c.socket = -1
		} else {
			c.socket = next[c.zone]
			next[c.zone]++
		}
		k := fmt.Sprintf("%s/%d", c.zone, c.socket)
		if e, seen := kind[k]; seen && e != c.energy {
			return nil, fmt.Errorf("%s: zone %s has both energy and power sensors (%s); map only one chip to it", base, c.zone, c.dir)
		}
		kind[k] = c.energy
	}
	return h, nil
}

func (z HwmonZones) names() []string {
	n := make([]string, 0, len(z))
	for k := range z {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// Name implements PowerReader.
func (h *Hwmon) Name() string { return "hwmon" }

// Local implements Local: sysfs files, read in microseconds.
func (h *Hwmon) Local() bool { return true }

// DeviceZones implements DeviceZoner: the zones of the GPU chips of the
// devices in pci (PCI addresses).
func (h *Hwmon) DeviceZones(pci map[string]bool) []ZoneID {
	var out []ZoneID
	for _, c := range h.chips {
		if c.zone == reading.ZoneGPU && pci[strings.ToLower(filepath.Base(c.devPath))] {
			out = append(out, ZoneID{c.zone, c.socket})
		}
	}
	return out
}

// GPUSockets are the sockets of the GPU zones the chips report.
func (h *Hwmon) GPUSockets() []int {
	var out []int
	for _, c := range h.chips {
		if c.zone == reading.ZoneGPU {
			out = append(out, c.socket)
		}
	}
	return out
}

// ReadPower implements PowerReader.
func (h *Hwmon) ReadPower(ctx context.Context) ([]Reading, error) {
	var out []Reading
	idx := map[zoneKey]int{}
	for _, c := range h.chips {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var sum float64
		for _, f := range c.files {
			path := filepath.Join(c.dir, f)
			b, err := h.readFile(path)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", path, err)
			}
			v, err := ParseHwmonValue(b)
			if err != nil {
				return nil, fmt.Errorf("parse %s: %w", path, err)
			}
			sum += float64(v) / 1e6 // µJ -> J, µW -> W
		}
		k := zoneKey{c.zone, c.socket}
		i, ok := idx[k]
		if !ok {
			idx[k] = len(out)
			out = append(out, Reading{Zone: c.zone, Socket: c.socket, Energy: c.energy})
			i = len(out) - 1
		}
		if c.energy {
			out[i].Joules += sum
		} else {
			out[i].Watts += sum
		}
	}
	return out, nil
}

// ParseHwmonValue parses a hwmon sensor file: one decimal integer. Power
// and energy are never negative; a negative value is a driver error.
func ParseHwmonValue(b []byte) (uint64, error) { return parseUint(b) }
