package cgroupstats

import (
	"errors"
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
}

// Declare declares collector.resources, bound to c.
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
}

// Groups returns the groups c names.
func (c Settings) Groups() Group {
	var g Group
	for _, name := range c.Resources {
		g |= GroupNames[name]
	}
	return g
}
