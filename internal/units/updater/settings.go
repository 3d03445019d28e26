package updater

import (
	"errors"
	"strings"
	"time"

	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/pkg/units"
)

// The updater.* keys (wattrace-api's).
const (
	KeyInterval        = "updater.interval"
	KeyDelay           = "updater.delay"
	KeyMaxWindow       = "updater.max-window"
	KeyLookback        = "updater.lookback"
	KeySelector        = "updater.selector"
	KeyClusterLabel    = "updater.cluster-label"
	KeyKinds           = "updater.kinds"
	KeySeriesRetention = "updater.series-retention"
)

// Declare declares updater.*, bound to c; Cluster and Now are the
// program's to set.
func (c *Config) Declare(s *setting.Set) {
	kinds := make([]string, 0, len(units.Kinds()))
	for _, k := range units.Kinds() {
		kinds = append(kinds, string(k))
	}
	s.AnyDuration(&c.Interval, KeyInterval, DefaultInterval, "Time between update cycles.").Checked(positive(KeyInterval, &c.Interval))
	s.AnyDuration(&c.Delay, KeyDelay, DefaultDelay, "How far behind now a cycle reads, so late samples have landed: more than the scrape interval plus ingestion delay (VictoriaMetrics: -search.latencyOffset, 30s).").Checked(func() error {
		if c.Delay < 0 {
			return setting.Invalid(KeyDelay, c.Delay, "must not be negative")
		}
		return nil
	})
	s.AnyDuration(&c.MaxWindow, KeyMaxWindow, DefaultMaxWindow, "Longest window one cycle reads; a longer outage is caught up in steps.").Checked(positive(KeyMaxWindow, &c.MaxWindow))
	s.AnyDuration(&c.Lookback, KeyLookback, DefaultLookback, "How far back the first cycle of an empty store reads.").Checked(positive(KeyLookback, &c.Lookback))
	s.String(&c.Selector, KeySelector, "", "Extra label matchers for the updater's queries, e.g. job=\"wattrace\".")
	s.String(&c.ClusterLabel, KeyClusterLabel, "", "Label naming a series' cluster (e.g. an external label); the cluster setting where absent.")
	setting.StringsOf(s, &c.Kinds, KeyKinds, nil, "Workload levels read: "+strings.Join(kinds, ", ")+". Empty: all.").Checked(func() error {
		var errs []error
		for _, k := range c.Kinds {
			if !k.Valid() {
				errs = append(errs, setting.Invalid(KeyKinds, k, "allowed: "+strings.Join(kinds, ", ")))
			}
		}
		return errors.Join(errs...)
	})
	s.AnyDuration(&c.SeriesRetention, KeySeriesRetention, DefaultSeriesRetention, "How long an ended unit's series state is kept, so series that return (an exporter that was unreachable) are not counted twice.").Checked(positive(KeySeriesRetention, &c.SeriesRetention))
}

// positive refuses a duration of 0 or less: New would take 0 for its
// default, which the setting's user did not ask for.
func positive(key string, d *time.Duration) func() error {
	return func() error {
		if *d <= 0 {
			return setting.Invalid(key, *d, "must be positive")
		}
		return nil
	}
}
