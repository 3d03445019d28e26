// Package cli is what wattrace's programs (the exporter, wattrace-api)
// share around their own settings: loading flags, environment and a YAML
// file in one precedence order, decoding values strictly with the key
// named in every error, the logger, and main's shape (configuration,
// version, signals, exit codes).
package cli

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cast"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/wattrace/wattrace/internal/setting"
)

// KeyConfigFile names the YAML file; it is a flag and an environment
// variable, never a key inside the file.
const KeyConfigFile = "config.file"

// Loader reads one program's settings, from lowest to highest precedence:
// built-in defaults (the flags'), the YAML file (config.file), environment
// variables (Prefix_KEY) and flags. Every setting has one key, the flag
// name without dashes: the same key in the file and, upper-cased with dots
// and dashes as underscores, after the prefix in the environment.
type Loader struct {
	// Prefix starts every environment variable (WATTRACE, WATTRACE_API).
	Prefix string
	// NotSettings are flags that only make sense on the command line
	// (version): never read from the file or the environment.
	NotSettings map[string]bool
	// Maps are the settings whose YAML value may be a map of entries
	// (power.max-watts: {package: 400}); the file's nested keys under
	// them fold back into one map.
	Maps func(key string) bool
}

var envReplacer = strings.NewReplacer(".", "_", "-", "_")

// EnvVar returns the environment variable that sets key.
func (l Loader) EnvVar(key string) string {
	return l.Prefix + "_" + strings.ToUpper(envReplacer.Replace(key))
}

// Load parses args into fs and merges them with the environment and the
// file. It returns the decoder of the merged values and the file read ("" if
// none). On --help it returns an error wrapping pflag.ErrHelp after fs has
// printed usage.
func (l Loader) Load(fs *pflag.FlagSet, args []string) (*Decoder, string, error) {
	if err := fs.Parse(args); err != nil {
		return nil, "", err
	}
	if len(fs.Args()) > 0 {
		return nil, "", fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	// "::" as key delimiter keeps flag names, which contain dots, as flat
	// keys. With viper's default "." delimiter collector.process (a bool) and
	// collector.process.top (an int) would collide as value and map.
	v := viper.NewWithOptions(viper.KeyDelimiter("::"))
	v.SetEnvPrefix(l.Prefix)
	v.SetEnvKeyReplacer(envReplacer)
	v.AutomaticEnv()

	keys := map[string]bool{}
	var bindErr error
	fs.VisitAll(func(f *pflag.Flag) {
		if l.NotSettings[f.Name] {
			return
		}
		keys[f.Name] = true
		if err := v.BindPFlag(f.Name, f); err != nil && bindErr == nil {
			bindErr = fmt.Errorf("binding flag %s: %w", f.Name, err)
		}
	})
	if bindErr != nil {
		return nil, "", bindErr
	}
	file := v.GetString(KeyConfigFile)
	if file != "" {
		settings, err := l.readFile(file, keys)
		if err != nil {
			return nil, "", err
		}
		if err := v.MergeConfigMap(settings); err != nil {
			return nil, "", fmt.Errorf("merging %s: %w", file, err)
		}
	}
	return &Decoder{v: v}, file, nil
}

// readFile reads the YAML file into a flat map keyed by setting key. Both
// flat keys ("stats.interval: 5s") and nested maps ("stats: {interval: 5s}")
// are accepted. Unknown keys are an error so that typos don't silently fall
// back to defaults.
func (l Loader) readFile(path string, known map[string]bool) (map[string]any, error) {
	fv := viper.NewWithOptions(viper.KeyDelimiter("::"))
	fv.SetConfigFile(path)
	fv.SetConfigType("yaml")
	if err := fv.ReadInConfig(); err != nil {
		return nil, fmt.Errorf("reading config file %s: %w", path, err)
	}
	out := map[string]any{}
	var rest []string
	for _, k := range fv.AllKeys() {
		key := strings.ReplaceAll(k, "::", ".")
		if known[key] && key != KeyConfigFile {
			if _, dup := out[key]; dup {
				// "a.b: 1" beside "a: {b: 2}": which one was meant?
				return nil, fmt.Errorf("config file %s: key %s is set twice (flat and nested)", path, key)
			}
			out[key] = fv.Get(k)
			continue
		}
		// A map under power.idle-watts (or power.max-watts) flattens into
		// power.idle-watts::package etc.; fold those back into one map.
		if mk, entry, ok := l.mapEntry(key); ok {
			m, isMap := out[mk].(map[string]any)
			if !isMap && out[mk] != nil {
				return nil, fmt.Errorf("config file %s: key %s is set twice (flat and nested)", path, mk)
			}
			if m == nil {
				m = map[string]any{}
				out[mk] = m
			}
			if _, dup := m[entry]; dup {
				return nil, fmt.Errorf("config file %s: key %s.%s is set twice (flat and nested)", path, mk, entry)
			}
			m[entry] = fv.Get(k)
			continue
		}
		rest = append(rest, key)
	}
	if len(rest) > 0 {
		sort.Strings(rest)
		return nil, fmt.Errorf("config file %s: unknown keys %s", path, strings.Join(rest, ", "))
	}
	return out, nil
}

// mapEntry splits a flattened map key such as power.max-watts.package.
func (l Loader) mapEntry(key string) (string, string, bool) {
	if l.Maps == nil {
		return "", "", false
	}
	for i := strings.LastIndexByte(key, '.'); i > 0; i = strings.LastIndexByte(key[:i], '.') {
		if mk, entry := key[:i], key[i+1:]; entry != "" && l.Maps(mk) {
			return mk, entry, true
		}
	}
	return "", "", false
}

// Decoder converts the loaded, untyped values, reporting the key of any
// value that doesn't parse (viper's plain getters would silently return
// zero). Err returns every problem found.
type Decoder struct {
	v    *viper.Viper
	errs []error
}

// Err joins the problems found so far.
func (d *Decoder) Err() error { return errors.Join(d.errs...) }

// Fail records that val is not a valid value of key.
func (d *Decoder) Fail(key string, val any, why string) {
	d.errs = append(d.errs, setting.Invalid(key, val, why))
}

// String returns key's value, trimmed.
func (d *Decoder) String(key string) string {
	return strings.TrimSpace(d.v.GetString(key))
}

// Strings returns a list: repeated flags, a YAML list, or (environment)
// one comma-separated string.
func (d *Decoder) Strings(key string) []string {
	var out []string
	for _, s := range cast.ToStringSlice(d.v.Get(key)) {
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

// Duration returns a duration; a bare number, which would be read as
// nanoseconds, is refused: nobody writing "5" meant that.
func (d *Decoder) Duration(key string) time.Duration {
	val := d.v.Get(key)
	switch t := val.(type) {
	case time.Duration:
		return t
	case string:
		if dur, err := time.ParseDuration(strings.TrimSpace(t)); err == nil {
			return dur
		}
	}
	d.Fail(key, val, "want a duration such as 5s or 1m")
	return 0
}

// Float returns a finite number.
func (d *Decoder) Float(key string) float64 {
	val := d.v.Get(key)
	f, err := cast.ToFloat64E(val)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		d.Fail(key, val, "want a finite number")
	}
	return f
}

// Int returns an integer; a string must be plain decimal (cast would
// take "0x10" and "1e3").
func (d *Decoder) Int(key string) int {
	val := d.v.Get(key)
	if s, ok := val.(string); ok {
		i, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			d.Fail(key, val, "want an integer")
		}
		return i
	}
	i, err := cast.ToIntE(val)
	if err != nil {
		d.Fail(key, val, "want an integer")
	}
	return i
}

// Bool returns true or false.
func (d *Decoder) Bool(key string) bool {
	val := d.v.Get(key)
	b, err := cast.ToBoolE(val)
	if err != nil {
		d.Fail(key, val, "want true or false")
	}
	return b
}

// Map accepts "package=10,dram=2" (flag, environment, YAML string) or a
// YAML map {package: 10, dram: 2}.
func (d *Decoder) Map(key string) map[string]float64 {
	out := map[string]float64{}
	switch val := d.v.Get(key).(type) {
	case nil:
	case string:
		for _, item := range strings.Split(val, ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			name, w, ok := strings.Cut(item, "=")
			name = strings.TrimSpace(name)
			f, err := strconv.ParseFloat(strings.TrimSpace(w), 64)
			if !ok || name == "" || err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				d.Fail(key, val, "want zone=watts pairs such as package=10,dram=2")
				return nil
			}
			out[name] = f
		}
	case map[string]any:
		for name, w := range val {
			f, err := cast.ToFloat64E(w)
			if err != nil || name == "" || math.IsNaN(f) || math.IsInf(f, 0) {
				d.Fail(key, fmt.Sprintf("%s: %v", name, w), "want a number of watts per zone")
				return nil
			}
			out[name] = f
		}
	default:
		d.Fail(key, val, "want zone=watts pairs such as package=10,dram=2")
		return nil
	}
	return out
}

// kinds says, per setting.Kind, how its flag is added and its value
// decoded.
var kinds = map[setting.Kind]struct {
	flag   func(fs *pflag.FlagSet, st *setting.Setting)
	decode func(d *Decoder, key string) any
}{
	setting.Bool: {func(fs *pflag.FlagSet, st *setting.Setting) { fs.Bool(st.Key, st.Default.(bool), st.Help) },
		func(d *Decoder, key string) any { return d.Bool(key) }},
	setting.Int: {func(fs *pflag.FlagSet, st *setting.Setting) { fs.Int(st.Key, st.Default.(int), st.Help) },
		func(d *Decoder, key string) any { return d.Int(key) }},
	setting.Float: {func(fs *pflag.FlagSet, st *setting.Setting) { fs.Float64(st.Key, st.Default.(float64), st.Help) },
		func(d *Decoder, key string) any { return d.Float(key) }},
	setting.String: {func(fs *pflag.FlagSet, st *setting.Setting) { fs.String(st.Key, st.Default.(string), st.Help) },
		func(d *Decoder, key string) any { return d.String(key) }},
	setting.Strings: {func(fs *pflag.FlagSet, st *setting.Setting) {
		def, _ := st.Default.([]string)
		fs.StringSlice(st.Key, def, st.Help)
	}, func(d *Decoder, key string) any { return d.Strings(key) }},
	setting.Duration: {func(fs *pflag.FlagSet, st *setting.Setting) { fs.Duration(st.Key, st.Default.(time.Duration), st.Help) },
		func(d *Decoder, key string) any { return d.Duration(key) }},
	// A map is name=value pairs on the command line and in the
	// environment, a map or that string in the file.
	setting.Map: {func(fs *pflag.FlagSet, st *setting.Setting) { fs.String(st.Key, "", st.Help) },
		func(d *Decoder, key string) any { return d.Map(key) }},
}

// KeyVersion is the flag that prints the version and exits: no setting,
// so never read from the file or the environment (Loader.NotSettings).
const KeyVersion = "version"

// NewFlagSet returns a program's flags in the order --help lists them:
// config.file (fileExample shows a line of the file), version, then a
// flag per declared setting in the order declared.
func NewFlagSet(name, fileExample string, s *setting.Set) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false
	fs.String(KeyConfigFile, "", "YAML configuration file; keys are flag names without the leading dashes, e.g. "+fileExample+".")
	fs.Bool(KeyVersion, false, "Print version information and exit.")
	AddFlags(fs, s)
	return fs
}

// AddFlags adds a flag for each declared setting, with its default and
// help.
func AddFlags(fs *pflag.FlagSet, s *setting.Set) {
	for _, st := range s.All() {
		kinds[st.Kind].flag(fs, st)
	}
}

// Decode stores each declared setting's loaded value where the setting is
// bound. Checks run later, once, over the whole configuration (Set.Check).
func (d *Decoder) Decode(s *setting.Set) {
	for _, st := range s.All() {
		st.Assign(kinds[st.Kind].decode(d, st.Key))
	}
}
