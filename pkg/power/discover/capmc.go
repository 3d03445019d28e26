package discover

import (
	"context"

	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/power/capmc"
)

// CapmcSettings are the capmc row's own settings.
type CapmcSettings struct {
	// Mode is power.capmc: off, or auto (use `capmc get_system_power`
	// when it is on PATH).
	Mode string
}

// CapmcModes are power.capmc's values.
var CapmcModes = []string{"off", "auto"}

func declareCapmc(s *setting.Set, o *CapmcSettings) {
	s.Enum(&o.Mode, "power.capmc", "off", CapmcModes, "Read node power with HPE Cray capmc get_system_power when it is on PATH: off or auto. It reports a whole partition's power, the node's only on a single-node partition.")
}

func openCapmc(ctx context.Context, e *Env, o *CapmcSettings) (power.Meter, string, error) {
	if o.Mode != "auto" {
		return nil, "not enabled (power.capmc=off): it reports a whole partition's power, the node's only on a single-node partition", nil
	}
	path, err := e.Cfg.LookPath("capmc")
	if err != nil {
		return nil, "capmc not found on PATH", nil
	}
	window := max(1, int(e.Cfg.Interval.Seconds()))
	open := func(ctx context.Context) (power.Meter, error) {
		m, err := capmc.NewMeter(path, window)
		if err != nil {
			return nil, err
		}
		return e.FirstReading(ctx, m)
	}
	m, err := open(ctx)
	if err != nil {
		return e.Retry("capmc", err, open), "", nil
	}
	return m, path, nil
}
