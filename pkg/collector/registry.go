package collector

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/pkg/snapshot"
)

// subCollector is one collector. update gets the snapshot the whole scrape
// uses (nil before the first interval).
type subCollector interface {
	describe(ch chan<- *prometheus.Desc)
	update(ch chan<- prometheus.Metric, snap *snapshot.Snapshot) error
}

// Registration is one collector as its file registers it: a name (the
// collector label of the scrape metrics and, for a Flag collector, the
// collector.<name> configuration key), its default and help, and how to
// build it.
type Registration struct {
	Name string
	// Flag is true for collectors turned on and off by collector.<Name>;
	// the others are on whenever Options gives them something to export.
	Flag      bool
	DefaultOn bool
	Help      string

	// on reports whether Options enable the collector; nil means
	// Options.Enabled[Name].
	on  func(o Options) bool
	new func(o Options) subCollector
}

// registrations is filled by the collector files' init functions and
// only read afterwards.
var registrations = map[string]Registration{}

// register adds a collector; each collector file calls it from init, so
// adding a collector touches its own file (plus tests and docs).
func register(r Registration) {
	if _, dup := registrations[r.Name]; dup {
		panic("collector registered twice: " + r.Name)
	}
	registrations[r.Name] = r
}

// Registered lists every collector, sorted by name. Configuration builds
// its collector.<name> flags from the Flag ones.
func Registered() []Registration {
	out := make([]Registration, 0, len(registrations))
	for _, r := range registrations {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (r Registration) enabled(o Options) bool {
	if r.on != nil {
		return r.on(o)
	}
	return o.Enabled[r.Name]
}

// newDesc builds the descriptor of the family wattrace_<sub>_<name>.
func newDesc(sub, name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(namespace, sub, name), help, labels, nil)
}

// describeAll sends descriptors; collectors' describe methods list theirs.
func describeAll(ch chan<- *prometheus.Desc, ds ...*prometheus.Desc) {
	for _, d := range ds {
		ch <- d
	}
}
