package power

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
	"go.uber.org/zap"
)

// MaxWatts is the most each zone can plausibly draw, in watts: per socket
// for the CPU zones (package, core, uncore, dram), per device for gpu, per
// node for psys and platform. A reading implying more (an energy counter
// that grew faster, a power sensor reading higher) is rejected, never
// credited. Zones not listed use DefaultMaxWatts.
type MaxWatts map[string]float64

// defaultMaxWatts are generous: several times the largest parts shipping
// (a 500 W server CPU, a 1.2 kW accelerator, a 10 kW eight-GPU node), so
// only readings no hardware can produce are refused.
var defaultMaxWatts = map[string]float64{
	reading.ZonePackage:  1000,
	reading.ZoneCore:     1000,
	reading.ZoneUncore:   1000,
	reading.ZoneDRAM:     500,
	reading.ZonePsys:     2000,
	reading.ZoneGPU:      2000,
	reading.ZonePlatform: 20000,
}

// absurdWatts bounds what configuration may set: 1 MW for one zone of one
// node is no ceiling at all.
const absurdWatts = 1e6

// DefaultMaxWatts returns the built-in ceilings (a copy).
func DefaultMaxWatts() MaxWatts {
	m := make(MaxWatts, len(defaultMaxWatts))
	for k, v := range defaultMaxWatts {
		m[k] = v
	}
	return m
}

// For is zone's ceiling in watts.
func (m MaxWatts) For(zone string) float64 {
	if v, ok := m[zone]; ok && v > 0 {
		return v
	}
	if v, ok := defaultMaxWatts[zone]; ok {
		return v
	}
	return defaultMaxWatts[reading.ZonePlatform]
}

// ceiling is the ceiling of one sample: CPU zones reported for the whole
// node (socket -1: pm_counters' cpu_energy, a BMC's package figure) may
// span several sockets, so they get the node's ceiling.
func (m MaxWatts) ceiling(zone string, socket int) float64 {
	if socket < 0 && zone != reading.ZonePsys {
		return m.For(reading.ZonePlatform)
	}
	return m.For(zone)
}

// Zones lists the zone names a ceiling can be set for.
func Zones() []string {
	z := make([]string, 0, len(defaultMaxWatts))
	for k := range defaultMaxWatts {
		z = append(z, k)
	}
	sort.Strings(z)
	return z
}

// ValidateMaxWatts checks every ceiling names a known zone and is a
// finite, positive number of watts no larger than 1 MW; key names the
// setting in the error.
func ValidateMaxWatts(key string, m MaxWatts) error {
	for zone, v := range m {
		if _, ok := defaultMaxWatts[zone]; !ok {
			return fmt.Errorf("invalid value %q for %s: unknown zone %q (known: %s)", fmt.Sprint(v), key, zone, strings.Join(Zones(), ", "))
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v <= 0 || v > absurdWatts {
			return fmt.Errorf("invalid value %q for %s.%s: want a finite number of watts in (0, %g]", fmt.Sprint(v), key, zone, float64(absurdWatts))
		}
	}
	return nil
}

// MeterOptions are what every meter constructor shares.
type MeterOptions struct {
	// Log receives rate-limited warnings about failed reads and rejected
	// readings; nil logs nothing.
	Log *zap.Logger
	// MaxWatts are the per-zone ceilings; nil means DefaultMaxWatts.
	MaxWatts MaxWatts
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
}

// logger is o.Log, or a logger that drops everything.
func (o MeterOptions) logger() *zap.Logger {
	if o.Log == nil {
		return zap.NewNop()
	}
	return o.Log
}

func (o MeterOptions) now() func() time.Time {
	if o.Now == nil {
		return time.Now
	}
	return o.Now
}
