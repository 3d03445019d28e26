package dashlint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ConfigFile is the name of the exclusions file beside the dashboards, as
// dashboard-linter names it.
const ConfigFile = ".lint"

// Config is a .lint file: per rule, the findings excluded or turned into
// warnings, each with its reason.
type Config struct {
	Exclusions map[string]*RuleEntries `yaml:"exclusions"`
	Warnings   map[string]*RuleEntries `yaml:"warnings"`
}

// RuleEntries are one rule's exclusions (or warnings): every finding of
// the rule when Entries is empty, else those an entry matches.
type RuleEntries struct {
	Reason  string  `yaml:"reason"`
	Entries []Entry `yaml:"entries"`
}

// Entry matches the findings of one dashboard, panel or target; an empty
// field matches any.
type Entry struct {
	Reason    string `yaml:"reason"`
	Dashboard string `yaml:"dashboard"`
	Panel     string `yaml:"panel"`
	TargetIdx string `yaml:"targetIdx"`
}

func (e Entry) matches(f Finding) bool {
	if e.Dashboard != "" && e.Dashboard != f.Dashboard {
		return false
	}
	if e.Panel != "" && e.Panel != f.Panel {
		return false
	}
	if e.TargetIdx != "" && e.TargetIdx != strconv.Itoa(f.Target) {
		return false
	}
	return true
}

func (e Entry) String() string {
	var parts []string
	for _, kv := range [][2]string{{"dashboard", e.Dashboard}, {"panel", e.Panel}, {"targetIdx", e.TargetIdx}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+strconv.Quote(kv[1]))
		}
	}
	if len(parts) == 0 {
		return "every finding"
	}
	return strings.Join(parts, " ")
}

// LoadConfig reads a .lint file; a missing one is an empty Config. Every
// exclusion and warning must say why, in its rule's reason or in each of
// its entries', and name a rule there is.
func LoadConfig(path string) (*Config, error) {
	c := &Config{}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func (c *Config) check() error {
	var errs []error
	known := map[string]bool{}
	for _, r := range Rules() {
		known[r.Name] = true
	}
	for kind, m := range map[string]map[string]*RuleEntries{"exclusions": c.Exclusions, "warnings": c.Warnings} {
		for _, rule := range sortedKeys(m) {
			re := m[rule]
			if !known[rule] {
				errs = append(errs, fmt.Errorf("%s: no rule %s", kind, rule))
				continue
			}
			if re == nil || (re.Reason == "" && len(re.Entries) == 0) {
				errs = append(errs, fmt.Errorf("%s: %s has no reason", kind, rule))
				continue
			}
			for _, e := range re.Entries {
				if re.Reason == "" && e.Reason == "" {
					errs = append(errs, fmt.Errorf("%s: %s, entry %s, has no reason", kind, rule, e))
				}
				if e.TargetIdx != "" {
					if _, err := strconv.Atoi(e.TargetIdx); err != nil {
						errs = append(errs, fmt.Errorf("%s: %s, entry %s: targetIdx is not a number", kind, rule, e))
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Linter applies the rules and one Config to dashboards, and remembers
// which of the Config's entries matched a finding.
type Linter struct {
	cfg  *Config
	used map[string]bool
}

// New returns a linter with cfg's exclusions and warnings (none when nil).
func New(cfg *Config) *Linter {
	if cfg == nil {
		cfg = &Config{}
	}
	return &Linter{cfg: cfg, used: map[string]bool{}}
}

// Lint returns every finding of every rule on d, those the Config
// excludes or warns about marked so.
func (l *Linter) Lint(d *Dashboard) []Finding {
	var out []Finding
	for _, rule := range Rules() {
		r := &report{rule: rule.Name, d: d}
		rule.check(d, r)
		for _, f := range r.out {
			if reason, ok := l.match("exclusions", l.cfg.Exclusions, f); ok {
				f.Excluded, f.Reason = true, reason
			} else if reason, ok := l.match("warnings", l.cfg.Warnings, f); ok {
				f.Warning, f.Reason = true, reason
			}
			out = append(out, f)
		}
	}
	return out
}

func (l *Linter) match(kind string, m map[string]*RuleEntries, f Finding) (string, bool) {
	re, ok := m[f.Rule]
	if !ok || re == nil {
		return "", false
	}
	if len(re.Entries) == 0 {
		l.used[kind+"/"+f.Rule] = true
		return re.Reason, true
	}
	for i, e := range re.Entries {
		if e.matches(f) {
			l.used[fmt.Sprintf("%s/%s/%d", kind, f.Rule, i)] = true
			if e.Reason != "" {
				return e.Reason, true
			}
			return re.Reason, true
		}
	}
	return "", false
}

// Unused returns the Config's exclusions and warnings that matched no
// finding of the dashboards linted so far: each is either stale, to be
// removed, or misspelt.
func (l *Linter) Unused() []string {
	var out []string
	for kind, m := range map[string]map[string]*RuleEntries{"exclusions": l.cfg.Exclusions, "warnings": l.cfg.Warnings} {
		for _, rule := range sortedKeys(m) {
			re := m[rule]
			if re == nil {
				continue
			}
			if len(re.Entries) == 0 {
				if !l.used[kind+"/"+rule] {
					out = append(out, fmt.Sprintf("%s: %s matched nothing", kind, rule))
				}
				continue
			}
			for i, e := range re.Entries {
				if !l.used[fmt.Sprintf("%s/%s/%d", kind, rule, i)] {
					out = append(out, fmt.Sprintf("%s: %s, entry %s, matched nothing", kind, rule, e))
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// Failed reports whether findings hold an error: a finding neither
// excluded nor a warning, or, when strict, a warning too.
func Failed(findings []Finding, strict bool) bool {
	for _, f := range findings {
		if !f.Excluded && (!f.Warning || strict) {
			return true
		}
	}
	return false
}

// Dir lints every *.json dashboard in dir with dir's .lint file. It
// returns the findings by file, sorted by file name, and the .lint
// entries that matched nothing.
func Dir(dir string) (files []string, findings map[string][]Finding, unused []string, err error) {
	cfg, err := LoadConfig(filepath.Join(dir, ConfigFile))
	if err != nil {
		return nil, nil, nil, err
	}
	files, err = filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, nil, nil, err
	}
	sort.Strings(files)
	l := New(cfg)
	findings = map[string][]Finding{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, nil, nil, err
		}
		d, err := Parse(b)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s: %w", f, err)
		}
		findings[f] = l.Lint(d)
	}
	return files, findings, l.Unused(), nil
}

// jsonString decodes a JSON string.
func jsonString(raw json.RawMessage, s *string) error { return json.Unmarshal(raw, s) }
