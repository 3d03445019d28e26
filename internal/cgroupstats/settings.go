package cgroupstats

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/wattrace/wattrace/internal/setting"
)

// ResourceGroups are collector.resources' values, in the order errors and
// help list them.
var ResourceGroups = []string{"cpu", "memory", "io", "pressure", "tasks"}

// Settings are the cgroup resource counters' settings.
type Settings struct {
	// Resources is collector.resources: the groups read and exported per
	// workload (ResourceGroups); none reads no cgroup file.
	Resources []string
	// StaleScrapes is collector.resources.stale-scrapes: how many scrapes
	// after the one it was read for a workload's reading may still be
	// exported (the stats loop's resource cache reads each workload's
	// files again when its reading would grow older).
	StaleScrapes int
}

// KeyStaleScrapes is the key of Settings.StaleScrapes.
const KeyStaleScrapes = "collector.resources.stale-scrapes"

// MaxStaleScrapes bounds collector.resources.stale-scrapes: beyond it a
// memory gauge says more about the past than about the workload.
const MaxStaleScrapes = 10

// Declare declares collector.resources and
// collector.resources.stale-scrapes, bound to c.
func (c *Settings) Declare(s *setting.Set) {
	s.Strings(&c.Resources, "collector.resources", []string{"memory"}, "Cgroup resource groups read and exported per workload, each file at most once per scrape: "+strings.Join(ResourceGroups, ", ")+" (empty: none). Series per workload: cpu 2, memory up to 7, io 4 per device, pressure up to 6, tasks 1.").Checked(func() error {
		var errs []error
		for _, g := range c.Resources {
			if !slices.Contains(ResourceGroups, g) {
				errs = append(errs, setting.Invalid("collector.resources", g, "allowed "+strings.Join(ResourceGroups, ", ")))
			}
		}
		return errors.Join(errs...)
	})
	s.Int(&c.StaleScrapes, KeyStaleScrapes, 1, fmt.Sprintf("At most how many scrapes old a workload's resource counters may be: a reading is exported by the scrape it was read for and by up to this many after it (each finding a new snapshot), the workloads' reads spread evenly over them; 0 reads every workload's files at every such scrape. 1 reads each workload's files every other scrape, half of them at each. At most %d.", MaxStaleScrapes),
		0, "must be >= 0").Checked(func() error {
		if c.StaleScrapes > MaxStaleScrapes {
			return setting.Invalid(KeyStaleScrapes, c.StaleScrapes, fmt.Sprintf("at most %d", MaxStaleScrapes))
		}
		return nil
	})
}

// Groups returns the groups c names.
func (c Settings) Groups() Group {
	var g Group
	for _, name := range c.Resources {
		g |= GroupNames[name]
	}
	return g
}
