package collector

import (
	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// Selection is which collectors and workload levels run, and the
// collectors' own settings: the collector.<name>, collector.<name>.* and
// collector.<level> settings, declared from the registry and the table of
// kinds, so a collector or a kind brings its switch with it.
type Selection struct {
	// Enabled says, per collector with a flag (Registration.Flag),
	// whether collector.<name> turns it on.
	Enabled map[string]bool
	// Settings are the collectors' own settings (collector.process.top,
	// collector.probes.per-cgroup, …), declared by their registrations.
	Settings Settings
	// LevelOn says, per workload level (ident.Levels), whether
	// collector.<level> exports it.
	LevelOn map[ident.Kind]bool
}

// Key is the setting that turns collector (or level) name on or off.
func Key(name string) string { return "collector." + name }

// Declare declares collector.<name> for every Flag collector, the
// collectors' own settings and collector.<level> for every workload
// level, bound to c.
func (c *Selection) Declare(s *setting.Set) {
	if c.Enabled == nil {
		c.Enabled = map[string]bool{}
	}
	if c.Settings == nil {
		c.Settings = Settings{}
	}
	if c.LevelOn == nil {
		c.LevelOn = map[ident.Kind]bool{}
	}
	for _, r := range Registered() {
		if r.Flag {
			setting.BoolIn(s, c.Enabled, r.Name, Key(r.Name), r.DefaultOn, r.Help)
		}
	}
	c.Settings.Declare(s)
	for _, l := range ident.Levels() {
		setting.BoolIn(s, c.LevelOn, l, Key(string(l)), true, ident.LevelHelp(l))
	}
}

// Levels returns the workload levels whose collectors are on.
func (c Selection) Levels() []ident.Kind {
	var out []ident.Kind
	for _, l := range ident.Levels() {
		if c.LevelOn[l] {
			out = append(out, l)
		}
	}
	return out
}
