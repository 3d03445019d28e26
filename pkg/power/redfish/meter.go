package redfish

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/reading"
)

// Resource shapes: only the properties we use. Pointers tell "absent or
// null" from zero; a property of the wrong JSON type fails the decode.
type odataID struct {
	ID string `json:"@odata.id"`
}

type status struct {
	State string `json:"State"`
}

type excerpt struct {
	Reading       *float64 `json:"Reading"`
	DataSourceURI string   `json:"DataSourceUri"`
}

type chassis struct {
	ID                 string   `json:"Id"`
	EnvironmentMetrics *odataID `json:"EnvironmentMetrics"`
	PowerSubsystem     *odataID `json:"PowerSubsystem"`
	Power              *odataID `json:"Power"`
}

type collection struct {
	Members []odataID `json:"Members"`
}

type environmentMetrics struct {
	PowerWatts   *excerpt `json:"PowerWatts"`
	EnergyJoules *excerpt `json:"EnergyJoules"`
}

type sensor struct {
	Reading      *float64 `json:"Reading"`
	ReadingUnits string   `json:"ReadingUnits"`
	ReadingTime  string   `json:"ReadingTime"`
	// ReadingRangeMax is the sensor's own declared maximum: a reading
	// above it is a glitch, not a measurement.
	ReadingRangeMax *float64 `json:"ReadingRangeMax"`
	Status          status   `json:"Status"`
}

type powerSubsystem struct {
	PowerSupplies *odataID `json:"PowerSupplies"`
}

type powerSupply struct {
	Metrics *odataID `json:"Metrics"`
	Status  status   `json:"Status"`
}

type powerSupplyMetrics struct {
	InputPowerWatts *excerpt `json:"InputPowerWatts"`
}

type legacyPower struct {
	PowerControl []struct {
		PowerConsumedWatts *float64 `json:"PowerConsumedWatts"`
		Status             status   `json:"Status"`
	} `json:"PowerControl"`
}

// plan is where the meter reads, chosen once (and again after a 404).
type plan struct {
	kind  planKind
	paths []string // the resources read each time
	desc  string
}

type planKind int

const (
	planEnvEnergy    planKind = iota // EnvironmentMetrics.EnergyJoules
	planEnergySensor                 // the Sensor EnergyJoules points to
	planPowerSensor                  // the Sensor PowerWatts points to (has ReadingTime)
	planEnvPower                     // EnvironmentMetrics.PowerWatts
	planPSU                          // Σ PowerSupplyMetrics.InputPowerWatts
	planLegacy                       // Power.PowerControl[].PowerConsumedWatts
)

// Meter reads the node's power or energy (zone platform) from a Redfish
// BMC. It is a power.PowerReader: wrap it with power.NewCached.
//
// Preference, per chassis: an energy counter in joules (EnvironmentMetrics
// EnergyJoules, or the Sensor it points to), then power from the Sensor
// behind EnvironmentMetrics PowerWatts (its ReadingTime times the sample),
// then PowerWatts itself, then the sum of the power supplies' input power
// (PowerSubsystem), then the legacy Power resource. EnergykWh is not used:
// a counter that ticks once per kilowatt-hour (hours at node power) cannot
// drive a seconds-long interval.
type Meter struct {
	c       *Client
	chassis string

	mu   sync.Mutex
	plan *plan
}

// NewMeter validates cfg and returns a meter; nothing is sent before the
// first ReadPower.
func NewMeter(cfg Config) (*Meter, error) {
	c, err := NewClient(cfg)
	if err != nil {
		return nil, err
	}
	return &Meter{c: c, chassis: cfg.Chassis}, nil
}

// Client is the underlying client.
func (m *Meter) Client() *Client { return m.c }

// Name implements power.PowerReader.
func (m *Meter) Name() string { return "redfish" }

// Source describes what the meter reads ("" before the first read).
func (m *Meter) Source() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.plan == nil {
		return ""
	}
	return m.plan.desc
}

// Close logs out.
func (m *Meter) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return m.c.Logout(ctx)
}

// ReadPower implements power.PowerReader.
func (m *Meter) ReadPower(ctx context.Context) ([]power.Reading, error) {
	m.mu.Lock()
	p := m.plan
	m.mu.Unlock()
	if p == nil {
		var err error
		if p, err = m.discover(ctx); err != nil {
			return nil, err
		}
		m.mu.Lock()
		m.plan = p
		m.mu.Unlock()
	}
	r, err := m.read(ctx, p)
	if err != nil && strings.Contains(err.Error(), "HTTP 404") {
		m.mu.Lock()
		m.plan = nil // the resource moved (firmware update): look again
		m.mu.Unlock()
	}
	if err != nil {
		return nil, err
	}
	return []power.Reading{r}, nil
}

func (m *Meter) read(ctx context.Context, p *plan) (power.Reading, error) {
	r := power.Reading{Zone: reading.ZonePlatform, Socket: -1}
	switch p.kind {
	case planEnvEnergy, planEnvPower:
		var env environmentMetrics
		if err := m.c.Get(ctx, p.paths[0], &env); err != nil {
			return r, err
		}
		x := env.PowerWatts
		if p.kind == planEnvEnergy {
			x = env.EnergyJoules
		}
		if x == nil || x.Reading == nil {
			return r, fmt.Errorf("redfish %s: %s: no reading", m.c.bmc.Host, p.desc)
		}
		r.Energy = p.kind == planEnvEnergy
		r.Joules, r.Watts = *x.Reading, *x.Reading
	case planEnergySensor, planPowerSensor:
		unit := "W"
		if p.kind == planEnergySensor {
			unit = "J"
		}
		s, at, err := m.readSensor(ctx, p.paths[0], unit)
		if err != nil {
			return r, err
		}
		r.Energy = p.kind == planEnergySensor
		r.Joules, r.Watts, r.Time = *s.Reading, *s.Reading, at
		if !r.Energy && s.ReadingRangeMax != nil && *s.ReadingRangeMax > 0 {
			r.Max = *s.ReadingRangeMax
		}
	case planPSU:
		for _, mp := range p.paths {
			var psm powerSupplyMetrics
			if err := m.c.Get(ctx, mp, &psm); err != nil {
				return r, err
			}
			if psm.InputPowerWatts == nil || psm.InputPowerWatts.Reading == nil {
				return r, fmt.Errorf("redfish %s: %s: InputPowerWatts has no reading", m.c.bmc.Host, mp)
			}
			r.Watts += *psm.InputPowerWatts.Reading
		}
	case planLegacy:
		var pw legacyPower
		if err := m.c.Get(ctx, p.paths[0], &pw); err != nil {
			return r, err
		}
		v, ok := legacyWatts(pw)
		if !ok {
			return r, fmt.Errorf("redfish %s: %s: no PowerControl with PowerConsumedWatts", m.c.bmc.Host, p.paths[0])
		}
		r.Watts = v
	}
	// Range, sign and finiteness are checked where every meter's readings
	// are (power.Cached), so a bad one is counted and logged as rejected.
	return r, nil
}

func legacyWatts(pw legacyPower) (float64, bool) {
	// PowerControl[0] is the chassis' total on every BMC we know of;
	// later entries, where present, are parts of it (CPU, memory).
	for _, pc := range pw.PowerControl {
		if pc.PowerConsumedWatts != nil && usable(pc.Status.State) {
			return *pc.PowerConsumedWatts, true
		}
	}
	return 0, false
}

// usable accepts the Status.State values of a sensor that reads.
func usable(state string) bool { return state == "" || state == "Enabled" }

func (m *Meter) readSensor(ctx context.Context, p, unit string) (sensor, time.Time, error) {
	var s sensor
	if err := m.c.Get(ctx, p, &s); err != nil {
		return s, time.Time{}, err
	}
	if !usable(s.Status.State) {
		return s, time.Time{}, fmt.Errorf("redfish %s: sensor %s is %s", m.c.bmc.Host, p, s.Status.State)
	}
	if s.Reading == nil {
		return s, time.Time{}, fmt.Errorf("redfish %s: sensor %s has no reading", m.c.bmc.Host, p)
	}
	if s.ReadingUnits != "" && s.ReadingUnits != unit {
		return s, time.Time{}, fmt.Errorf("redfish %s: sensor %s reads in %q, want %q", m.c.bmc.Host, p, s.ReadingUnits, unit)
	}
	var at time.Time
	if s.ReadingTime != "" {
		t, err := time.Parse(time.RFC3339, s.ReadingTime)
		if err != nil {
			return s, time.Time{}, fmt.Errorf("redfish %s: sensor %s ReadingTime: %w", m.c.bmc.Host, p, err)
		}
		at = t
	}
	return s, at, nil
}

// discover picks the chassis and the resource to read.
func (m *Meter) discover(ctx context.Context) (*plan, error) {
	var ids []string
	if m.chassis != "" {
		ids = []string{"/redfish/v1/Chassis/" + m.chassis}
	} else {
		var col collection
		if err := m.c.Get(ctx, "/redfish/v1/Chassis", &col); err != nil {
			return nil, err
		}
		for _, mem := range col.Members {
			ids = append(ids, mem.ID)
		}
	}
	var errs []error
	for _, id := range ids {
		if !safePath(id) {
			continue
		}
		p, err := m.planChassis(ctx, id)
		if errors.Is(err, ErrAuth) {
			return nil, err
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if p != nil {
			return p, nil
		}
		errs = append(errs, fmt.Errorf("%s: no power reading (EnvironmentMetrics, PowerSubsystem or Power)", id))
	}
	if len(ids) == 0 {
		errs = append(errs, errors.New("no chassis"))
	}
	return nil, fmt.Errorf("redfish %s: no chassis with power data: %w", m.c.bmc.Host, errors.Join(errs...))
}

func (m *Meter) planChassis(ctx context.Context, id string) (*plan, error) {
	var ch chassis
	if err := m.c.Get(ctx, id, &ch); err != nil {
		return nil, err
	}
	if ch.EnvironmentMetrics != nil && safePath(ch.EnvironmentMetrics.ID) {
		envPath := ch.EnvironmentMetrics.ID
		var env environmentMetrics
		if err := m.c.Get(ctx, envPath, &env); err == nil {
			if x := env.EnergyJoules; x != nil {
				if safePath(x.DataSourceURI) {
					if _, _, err := m.readSensor(ctx, x.DataSourceURI, "J"); err == nil {
						return &plan{planEnergySensor, []string{x.DataSourceURI}, "energy sensor " + x.DataSourceURI}, nil
					}
				}
				if x.Reading != nil {
					return &plan{planEnvEnergy, []string{envPath}, envPath + " EnergyJoules"}, nil
				}
			}
			if x := env.PowerWatts; x != nil {
				if safePath(x.DataSourceURI) {
					if _, _, err := m.readSensor(ctx, x.DataSourceURI, "W"); err == nil {
						return &plan{planPowerSensor, []string{x.DataSourceURI}, "power sensor " + x.DataSourceURI}, nil
					}
				}
				if x.Reading != nil {
					return &plan{planEnvPower, []string{envPath}, envPath + " PowerWatts"}, nil
				}
			}
		} else if errors.Is(err, ErrAuth) {
			return nil, err
		}
	}
	if ch.PowerSubsystem != nil && safePath(ch.PowerSubsystem.ID) {
		if p, err := m.planPSU(ctx, ch.PowerSubsystem.ID); err == nil && p != nil {
			return p, nil
		} else if errors.Is(err, ErrAuth) {
			return nil, err
		}
	}
	if ch.Power != nil && safePath(ch.Power.ID) {
		var pw legacyPower
		if err := m.c.Get(ctx, ch.Power.ID, &pw); err != nil {
			return nil, err
		}
		if _, ok := legacyWatts(pw); ok {
			return &plan{planLegacy, []string{ch.Power.ID}, ch.Power.ID + " PowerControl PowerConsumedWatts"}, nil
		}
	}
	return nil, nil
}

func (m *Meter) planPSU(ctx context.Context, ps string) (*plan, error) {
	var sub powerSubsystem
	if err := m.c.Get(ctx, ps, &sub); err != nil {
		return nil, err
	}
	if sub.PowerSupplies == nil || !safePath(sub.PowerSupplies.ID) {
		return nil, nil
	}
	var col collection
	if err := m.c.Get(ctx, sub.PowerSupplies.ID, &col); err != nil {
		return nil, err
	}
	var paths []string
	for _, mem := range col.Members {
		if !safePath(mem.ID) {
			continue
		}
		var psu powerSupply
		if err := m.c.Get(ctx, mem.ID, &psu); err != nil {
			return nil, err
		}
		// An absent bay draws nothing; an enabled one without metrics
		// would leave the sum short, so the plan is unusable.
		if psu.Status.State == "Absent" {
			continue
		}
		if psu.Metrics == nil || !safePath(psu.Metrics.ID) {
			return nil, nil
		}
		var psm powerSupplyMetrics
		if err := m.c.Get(ctx, psu.Metrics.ID, &psm); err != nil {
			return nil, err
		}
		if psm.InputPowerWatts == nil || psm.InputPowerWatts.Reading == nil {
			return nil, nil
		}
		paths = append(paths, psu.Metrics.ID)
	}
	if len(paths) == 0 {
		return nil, nil
	}
	return &plan{planPSU, paths, fmt.Sprintf("%s: input power of %d power supplies", sub.PowerSupplies.ID, len(paths))}, nil
}

// safePath accepts only clean, relative Redfish paths: a BMC's links may
// point anywhere (the mockup links a PDU on another host), and we follow
// none of those.
func safePath(p string) bool {
	return strings.HasPrefix(p, "/redfish/v1/") && path.Clean(p) == p &&
		!strings.ContainsAny(p, "?#%\\ ")
}
