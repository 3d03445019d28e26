package collector

import (
	"fmt"
	"sort"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/internal/snapshot"
)

// subCollector is one collector. update gets the snapshot the whole scrape
// uses (nil before the first interval).
type subCollector interface {
	describe(ch chan<- *prometheus.Desc)
	update(out *sink, snap *snapshot.Snapshot) error
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
	// declare declares the collector's own settings bound to own (a fresh
	// value when own is nil) and returns it; nil when it has none
	// (withSettings sets it).
	declare func(s *setting.Set, own any) any
}

// withSettings gives r settings of its own, of type S, declared beside
// the collector as node_exporter's collectors declare their flags: each
// key is collector.<name>.<setting>; the configuration's flag, environment
// variable and YAML key, its decoding and its check follow from declare.
// The collector reads them with settingsOf.
func withSettings[S any](r Registration, declare func(s *setting.Set, o *S)) Registration {
	r.declare = func(s *setting.Set, v any) any {
		o, ok := v.(*S)
		if !ok || o == nil {
			o = new(S)
		}
		before := len(s.All())
		declare(s, o)
		for _, st := range s.All()[before:] {
			if !strings.HasPrefix(st.Key, "collector."+r.Name+".") {
				panic(fmt.Sprintf("collector %s declares %s, outside collector.%s.*", r.Name, st.Key, r.Name))
			}
		}
		return o
	}
	return r
}

// Settings are the collectors' own settings, by collector name, as their
// registrations declare them (Declare) and the configuration decodes them.
type Settings map[string]any

// Declare declares every registered collector's own settings into s,
// bound to st's values (fresh ones where st has none).
func (st Settings) Declare(s *setting.Set) {
	for _, r := range Registered() {
		if r.declare != nil {
			st[r.Name] = r.declare(s, st[r.Name])
		}
	}
}

// Check runs the declared checks on the values st holds; each error names
// its key.
func (st Settings) Check() error {
	s := &setting.Set{}
	for _, r := range Registered() {
		if v, ok := st[r.Name]; ok && r.declare != nil {
			r.declare(s, v)
		}
	}
	return s.Check()
}

// settingsOf returns collector name's settings from o, or their defaults
// where o holds none (Options built in code).
func settingsOf[S any](o Options, name string) *S {
	if v, ok := o.Settings[name].(*S); ok && v != nil {
		return v
	}
	v := new(S)
	s := &setting.Set{}
	registrations[name].declare(s, v)
	s.FillDefaults()
	return v
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

// Registered lists every collector, sorted by name. Selection declares
// the collector.<name> settings of the Flag ones.
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
