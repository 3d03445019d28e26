package cgroup

import (
	"strings"

	"github.com/wattrace/wattrace/internal/setting"
)

// Hierarchies are cgroup.hierarchy's values: Auto, or a Kind to force.
var Hierarchies = []string{Auto, string(V2), string(CPUAcct), string(CPU)}

// Settings are the cgroup.* settings.
type Settings struct {
	// Hierarchy is cgroup.hierarchy, the override Mounts.Hierarchy takes.
	Hierarchy string
}

// Declare declares cgroup.hierarchy, bound to c.
func (c *Settings) Declare(s *setting.Set) {
	s.Enum(&c.Hierarchy, "cgroup.hierarchy", Auto, Hierarchies, "cgroup hierarchy that keys workloads: "+strings.Join(Hierarchies, ", ")+".")
}
