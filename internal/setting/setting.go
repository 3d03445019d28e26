// Package setting lets the code that uses a setting declare it: its key
// (the flag name, the YAML key and, upper-cased, the environment
// variable), default, help, where its value lands and how it is checked.
// Every block of settings is declared beside the code that reads it, as
// node_exporter's collectors declare their flags: a meter or a collector
// in its file, the stats loop's in internal/stats, the GPU sources' in
// internal/gpu/node, and so on. The exporter (cmd/exporter) turns every
// declared setting into a flag, decodes it from the flag, the environment
// or the file (internal/cli), and runs its checks once, each error naming
// the key.
//
// A Set holds no global state: each load declares into a fresh one, bound
// to that load's values.
package setting

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Kind is a setting's type as the loader decodes it.
type Kind int

// Kinds.
const (
	Bool     Kind = iota // bool
	Int                  // int
	Float                // float64
	String               // string
	Strings              // []string: repeatable, or comma-separated
	Duration             // time.Duration, with a unit
	Map                  // map[string]float64: name=number pairs, or a YAML map
)

// Setting is one declared setting.
type Setting struct {
	Key     string
	Kind    Kind
	Default any // the Kind's Go type; nil for a Map
	Help    string

	assign func(any)
	checks []func() error
	// unset reports a zero value that the checks would refuse (an empty
	// enum, a zero duration): FillUnset gives it the default.
	unset func() bool
}

// Assign stores v, of the Kind's Go type, where the setting's value lives.
func (s *Setting) Assign(v any) { s.assign(v) }

// Set is a list of declared settings.
type Set struct {
	list  []*Setting
	byKey map[string]*Setting
}

// All returns the settings in the order they were declared.
func (s *Set) All() []*Setting { return s.list }

// Lookup returns the setting with key, nil if none.
func (s *Set) Lookup(key string) *Setting { return s.byKey[key] }

// Check runs every setting's checks against the values now bound, and
// returns all problems; each names its key.
func (s *Set) Check() error {
	var errs []error
	for _, st := range s.list {
		for _, c := range st.checks {
			if err := c(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// FillUnset gives the default to every setting left at a zero value its
// checks would refuse. It serves values built in code rather than loaded
// (tests, other programs), which then need not repeat the defaults.
func (s *Set) FillUnset() {
	for _, st := range s.list {
		if st.unset != nil && st.unset() {
			st.assign(st.Default)
		}
	}
}

// FillDefaults gives every setting its default: the values a program
// that loads no configuration (a test, a library caller) starts from.
func (s *Set) FillDefaults() {
	for _, st := range s.list {
		if st.Kind == Map && st.Default == nil {
			st.assign(map[string]float64{})
			continue
		}
		st.assign(st.Default)
	}
}

// Try declares a block of settings on its own, gives every setting its
// default (FillDefaults), lets set change the block, and checks it: how a
// block's tests try its values (load := setting.Try[Settings]).
func Try[B any, P interface {
	*B
	Declare(*Set)
}](set func(P)) (P, error) {
	c := P(new(B))
	s := &Set{}
	c.Declare(s)
	s.FillDefaults()
	set(c)
	return c, s.Check()
}

// Invalid is the one shape of a configuration error: the value, the key,
// why.
func Invalid(key string, v any, why string) error {
	return fmt.Errorf("invalid value %q for %s: %s", fmt.Sprint(v), key, why)
}

func (s *Set) add(st *Setting) *Setting {
	if s.byKey == nil {
		s.byKey = map[string]*Setting{}
	}
	if _, dup := s.byKey[st.Key]; dup {
		// Two owners of one key is a programming error, found by any test
		// that loads the configuration.
		panic("setting declared twice: " + st.Key)
	}
	s.byKey[st.Key] = st
	s.list = append(s.list, st)
	return st
}

// Checked adds a check of the bound value; it returns an error built
// with Invalid, or nil.
func (s *Setting) Checked(check func() error) *Setting {
	s.checks = append(s.checks, check)
	return s
}

// Bool declares a bool setting bound to p.
func (s *Set) Bool(p *bool, key string, def bool, help string) *Setting {
	return s.add(&Setting{Key: key, Kind: Bool, Default: def, Help: help, assign: func(v any) { *p = v.(bool) }})
}

// Int declares an int setting bound to p; min is the least value allowed.
func (s *Set) Int(p *int, key string, def int, help string, min int, why string) *Setting {
	st := s.add(&Setting{Key: key, Kind: Int, Default: def, Help: help, assign: func(v any) { *p = v.(int) }})
	return st.Checked(func() error {
		if *p < min {
			return Invalid(key, *p, why)
		}
		return nil
	})
}

// AnyInt declares an int setting bound to p with no check of its own:
// where the range holds only with another setting (a count that matters
// only while a feature is on), the declarer adds the checks it needs.
func (s *Set) AnyInt(p *int, key string, def int, help string) *Setting {
	return s.add(&Setting{Key: key, Kind: Int, Default: def, Help: help, assign: func(v any) { *p = v.(int) }})
}

// Float declares a float64 setting bound to p.
func (s *Set) Float(p *float64, key string, def float64, help string) *Setting {
	return s.add(&Setting{Key: key, Kind: Float, Default: def, Help: help, assign: func(v any) { *p = v.(float64) }})
}

// String declares a free-form string setting bound to p.
func (s *Set) String(p *string, key, def, help string) *Setting {
	return s.add(&Setting{Key: key, Kind: String, Default: def, Help: help, assign: func(v any) { *p = v.(string) }})
}

// Enum declares a string setting bound to p whose value must be one of
// allowed.
func (s *Set) Enum(p *string, key, def string, allowed []string, help string) *Setting {
	st := s.String(p, key, def, help)
	st.unset = func() bool { return *p == "" }
	return st.Checked(func() error {
		if !slices.Contains(allowed, *p) {
			return Invalid(key, *p, "allowed "+strings.Join(allowed, ", "))
		}
		return nil
	})
}

// Strings declares a list setting bound to p.
func (s *Set) Strings(p *[]string, key string, def []string, help string) *Setting {
	return s.add(&Setting{Key: key, Kind: Strings, Default: def, Help: help, assign: func(v any) { *p = v.([]string) }})
}

// StringsOf declares a list setting bound to p whose elements are a
// named string type (a kind, a mode): loaded as strings, stored as T.
func StringsOf[T ~string](s *Set, p *[]T, key string, def []T, help string) *Setting {
	var strs []string
	for _, d := range def {
		strs = append(strs, string(d))
	}
	return s.add(&Setting{Key: key, Kind: Strings, Default: strs, Help: help, assign: func(v any) {
		var out []T
		for _, e := range v.([]string) {
			out = append(out, T(e))
		}
		*p = out
	}})
}

// Duration declares a duration setting bound to p that must be > 0.
func (s *Set) Duration(p *time.Duration, key string, def time.Duration, help string) *Setting {
	st := s.add(&Setting{Key: key, Kind: Duration, Default: def, Help: help, assign: func(v any) { *p = v.(time.Duration) }})
	st.unset = func() bool { return *p == 0 }
	return st.Checked(func() error {
		if *p <= 0 {
			return Invalid(key, *p, "must be > 0")
		}
		return nil
	})
}

// AnyDuration declares a duration setting bound to p with no check of
// its own: where 0 means something (never) or what is valid depends on
// another setting, the declarer adds the checks its meaning needs.
func (s *Set) AnyDuration(p *time.Duration, key string, def time.Duration, help string) *Setting {
	return s.add(&Setting{Key: key, Kind: Duration, Default: def, Help: help, assign: func(v any) { *p = v.(time.Duration) }})
}

// Map declares a name=number map bound to p (zone=watts).
func (s *Set) Map(p *map[string]float64, key, help string) *Setting {
	return s.add(&Setting{Key: key, Kind: Map, Help: help, assign: func(v any) { *p = v.(map[string]float64) }})
}

// Parsed declares a string setting whose value parse turns into p's
// shape (zone=metric pairs into a map, say). A value parse refuses is
// reported by Check, naming the key, with parse's reason; the default is
// parsed too, so it must parse.
func Parsed[T any](s *Set, p *T, key, def, help string, parse func(string) (T, error)) *Setting {
	var raw string
	var perr error
	st := s.add(&Setting{Key: key, Kind: String, Default: def, Help: help, assign: func(v any) {
		raw = v.(string)
		*p, perr = parse(raw)
	}})
	return st.Checked(func() error {
		if perr != nil {
			return Invalid(key, raw, perr.Error())
		}
		return nil
	})
}

// BoolIn declares a bool setting stored as m[k], for a family of switches
// kept in one map (collector.<name>). m must not be nil.
func BoolIn[K comparable](s *Set, m map[K]bool, k K, key string, def bool, help string) *Setting {
	return s.add(&Setting{Key: key, Kind: Bool, Default: def, Help: help, assign: func(v any) { m[k] = v.(bool) }})
}

// Declarer is a block of settings that declares itself, bound to its own
// fields: the shape the code that uses the settings reads.
type Declarer interface {
	Declare(s *Set)
}

// DeclarerFunc declares settings with a function (a block that needs an
// argument, such as the zone names it accepts).
type DeclarerFunc func(s *Set)

// Declare calls f.
func (f DeclarerFunc) Declare(s *Set) { f(s) }

// SortedKeys returns a map's keys in order, so that errors come out in a
// stable order.
func SortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
