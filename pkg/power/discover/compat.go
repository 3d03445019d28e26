package discover

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/power/redfish"
)

// Options is the former entry point's configuration.
//
// Deprecated: use Config and Open; Options and Discover remain only until
// the exporter calls Open.
type Options struct {
	SysfsRoot   string
	Redfish     *redfish.Config
	IPMIDevices []string
	NoIPMI      bool
	Interval    time.Duration
	Timeout     time.Duration
	LookPath    func(string) (string, error)
	// GPUsElsewhere is Config.GPUsElsewhere.
	GPUsElsewhere bool
}

// Discover walks the meter table as Open does in auto mode, without the
// estimator fallback, and returns the discovery lines.
//
// Deprecated: use Open.
func Discover(ctx context.Context, o Options) (power.Meter, []string, error) {
	cfg := Config{Source: "auto", SysfsRoot: o.SysfsRoot, Interval: o.Interval, Timeout: o.Timeout,
		Redfish: o.Redfish, IPMIDevices: o.IPMIDevices, LookPath: o.LookPath, GPUsElsewhere: o.GPUsElsewhere}
	if o.NoIPMI {
		cfg.IPMI = "off"
	}
	f, err := walk(ctx, cfg.withDefaults(), zap.NewNop())
	if err != nil {
		return nil, nil, err
	}
	lines := make([]string, len(f.notes))
	for i, n := range f.notes {
		lines[i] = n.line
	}
	if !f.measured {
		for _, m := range f.meters {
			closeMeter(m)
		}
		return nil, lines, errors.New("no power meter found (see the log lines for what was tried)")
	}
	return power.Combine(f.meters...), lines, nil
}
