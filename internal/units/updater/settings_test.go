package updater

import (
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/pkg/units"
)

// The updater.* block on its own: its defaults are New's, each bad value
// is refused naming its key, and the kinds land as units.Kind.
func TestSettingsCheckNamesTheKey(t *testing.T) {
	load := setting.Try[Config]
	c, err := load(func(*Config) {})
	if err != nil || c.Interval != DefaultInterval || c.Delay != DefaultDelay || c.MaxWindow != DefaultMaxWindow ||
		c.Lookback != DefaultLookback || c.SeriesRetention != DefaultSeriesRetention || c.Kinds != nil {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	for _, tt := range []struct {
		name string
		set  func(c *Config)
		want string
	}{
		{"interval 0", func(c *Config) { c.Interval = 0 }, `invalid value "0s" for updater.interval: must be positive`},
		{"negative delay", func(c *Config) { c.Delay = -time.Second }, `invalid value "-1s" for updater.delay: must not be negative`},
		{"window 0", func(c *Config) { c.MaxWindow = 0 }, `invalid value "0s" for updater.max-window: must be positive`},
		{"negative lookback", func(c *Config) { c.Lookback = -time.Hour }, `invalid value "-1h0m0s" for updater.lookback: must be positive`},
		{"retention 0", func(c *Config) { c.SeriesRetention = 0 }, `invalid value "0s" for updater.series-retention: must be positive`},
		{"a kind that is not", func(c *Config) { c.Kinds = []units.Kind{units.KindJob, "jobs"} }, `invalid value "jobs" for updater.kinds: allowed: job, pod, vm, container, unit, pbs_job`},
	} {
		if _, err := load(tt.set); err == nil || err.Error() != tt.want {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
	// A delay of 0 reads up to now: allowed.
	if _, err := load(func(c *Config) { c.Delay = 0 }); err != nil {
		t.Errorf("delay 0: %v", err)
	}
	s := &setting.Set{}
	c = &Config{}
	c.Declare(s)
	s.Lookup(KeyKinds).Assign([]string{"pod", "pbs_job"})
	if len(c.Kinds) != 2 || c.Kinds[0] != units.KindPod || c.Kinds[1] != units.KindPBSJob {
		t.Errorf("kinds %#v", c.Kinds)
	}
}
