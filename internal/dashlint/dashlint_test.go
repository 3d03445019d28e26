package dashlint

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func load(t *testing.T, b []byte) *Dashboard {
	t.Helper()
	d, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func good(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/good.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func rulesOf(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		if !slices.Contains(out, f.Rule) {
			out = append(out, f.Rule)
		}
	}
	return out
}

// The fixture passes every rule: what the rules accept (variables in
// both spellings, increase over $__range, a stat panel that maps values
// without a unit, a unit from an override, a custom unit, a text panel
// without query) is accepted.
func TestGoodDashboardPasses(t *testing.T) {
	if fs := New(nil).Lint(load(t, good(t))); len(fs) > 0 {
		t.Errorf("findings on the good dashboard:\n%v", fs)
	}
}

// Each rule fails the fixture with its breach planted, and no other rule
// does: the rules are tested one by one, and every rule has a plant.
func TestEachRuleCatchesItsPlant(t *testing.T) {
	if len(Rules()) != len(plants) {
		t.Errorf("%d rules, %d plants", len(Rules()), len(plants))
	}
	for _, r := range Rules() {
		t.Run(r.Name, func(t *testing.T) {
			b, err := Plant(r.Name, good(t))
			if err != nil {
				t.Fatal(err)
			}
			fs := New(nil).Lint(load(t, b))
			if got := rulesOf(fs); !slices.Equal(got, []string{r.Name}) {
				t.Errorf("rules failing: %v, want only %s:\n%v", got, r.Name, fs)
			}
			if !Failed(fs, true) {
				t.Errorf("not failed: %v", fs)
			}
		})
	}
}

// What dashboard-linter's rules let through and these do not: a counter
// with matchers summed raw, a fixed range outside rate(), rate() over the
// whole range; and where they agree (increase over the range, a counter's
// rate).
func TestPromQLRules(t *testing.T) {
	for _, tt := range []struct {
		expr string
		want []string
	}{
		{`sum(x_total{job=~"$job",instance=~"$instance"})`, []string{"target-counter-agg-rule"}},
		{`sum by (zone) ({__name__=~"a_(b|c)_total",job=~"$job",instance=~"$instance"})`, []string{"target-counter-agg-rule"}},
		{`avg_over_time(x{job=~"$job",instance=~"$instance"}[5m])`, []string{"target-rate-interval-rule"}},
		{`max_over_time(rate(x_total{job=~"$job",instance=~"$instance"}[$__rate_interval])[1h:])`, []string{"target-rate-interval-rule"}},
		{`rate(x_total{job=~"$job",instance=~"$instance"}[$__range])`, []string{"target-rate-interval-rule"}},
		{`increase(x_total{job=~"$job",instance=~"$instance"}[$__range]) / $__range_s`, nil},
		{`sum(irate(x_total{job=~"$job",instance=~"$instance"}[$__rate_interval])) by ($zone)`, nil},
		{`x{job="$job",instance=~"$instance"}`, []string{"target-job-rule"}},
		{`x{job=~"$job"} * on (instance) group_left y{job=~"$job",instance=~"$instance"}`, []string{"target-instance-rule"}},
		{`x{job=~"$job",instance=~"$instance"`, []string{"target-promql-rule"}},
		{``, []string{"target-promql-rule"}},
	} {
		d := load(t, good(t))
		d.Panels[0].Targets = []Target{{RefID: "A", Expr: tt.expr}}
		var got []string
		for _, f := range New(nil).Lint(d) {
			got = append(got, f.Rule)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: findings %v, want %v", tt.expr, got, tt.want)
		}
	}
}

// Variables outside strings become values that parse, inside strings
// they stay as written.
func TestExpand(t *testing.T) {
	for in, want := range map[string]string{
		`rate(x{job=~"$job"}[$__rate_interval])`:            `rate(x{job=~"$job"}[1111111s])`,
		`sum by ($zone, ${le}) (x{a='$b',c=~"${d:regex}"})`: `sum by (zone, le) (x{a='$b',c=~"${d:regex}"})`,
		`x[[[range]]] / $__range_s`:                         `x[range] / 2222222`,
		`x{a="say \"$q\""} + $__interval_ms`:                `x{a="say \"$q\""} + 3333333000`,
	} {
		if got := expand(in); got != want {
			t.Errorf("expand(%s) = %s, want %s", in, got, want)
		}
	}
}

// The variable queries Grafana's Prometheus data source takes, and what
// is wrong with others.
func TestVariableQueries(t *testing.T) {
	for q, ok := range map[string]bool{
		`label_values(job)`:                           true,
		`label_values(up{job=~"$job"}, instance)`:     true,
		`label_names()`:                               true,
		`metrics(wattrace_.*)`:                        true,
		`query_result(topk(5, up{job=~"$job"}))`:      true,
		`label_values(up{job=, instance)`:             false,
		`label_values(up, 2x)`:                        false,
		`label_values(sum(up), job)`:                  false,
		`series(up)`:                                  false,
		`up`:                                          false,
		`query_result(sum(rate(x[$__rate_interval]))`: false,
	} {
		if err := checkVariableQuery(q); (err == nil) != ok {
			t.Errorf("%s: %v, want ok=%v", q, err, ok)
		}
	}
}

// The .lint file: an exclusion by entry silences only what it names, a
// rule-wide one all of its rule; warnings fail only strict runs; entries
// that match nothing are reported; reasons are required and rules must
// exist.
func TestConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, ConfigFile)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	b, err := Plant("panel-title-description-rule", good(t))
	if err != nil {
		t.Fatal(err)
	}
	d := load(t, b)
	d.Editable = true
	cfg, err := LoadConfig(write(`
exclusions:
  panel-title-description-rule:
    entries:
      - dashboard: Good
        panel: Power
        reason: a test
      - panel: Gone
        reason: stale
warnings:
  uneditable-dashboard:
    reason: a test's warning
`))
	if err != nil {
		t.Fatal(err)
	}
	l := New(cfg)
	fs := l.Lint(d)
	if len(fs) != 2 || !fs[0].Excluded || fs[0].Reason != "a test" || !fs[1].Warning || fs[1].Excluded {
		t.Fatalf("findings %v", fs)
	}
	if Failed(fs, false) || !Failed(fs, true) {
		t.Errorf("a warning fails strict runs only: %v", fs)
	}
	if u := l.Unused(); len(u) != 1 || !strings.Contains(u[0], `panel="Gone"`) {
		t.Errorf("unused %v, want the Gone entry", u)
	}
	for body, want := range map[string]string{
		"exclusions:\n  panel-units-rule:\n    entries:\n      - panel: A\n":                      "has no reason",
		"exclusions:\n  panel-units-rule:\n":                                                      "has no reason",
		"exclusions:\n  no-such-rule:\n    reason: x\n":                                           "no rule no-such-rule",
		"exclusions:\n  panel-units-rule:\n    reason: x\n    entries:\n      - targetIdx: one\n": "targetIdx is not a number",
		"exclusion:\n  panel-units-rule:\n    reason: x\n":                                        "field exclusion not found",
	} {
		if _, err := LoadConfig(write(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", body, err, want)
		}
	}
	if c, err := LoadConfig(filepath.Join(dir, "none", ConfigFile)); err != nil || len(c.Exclusions) != 0 {
		t.Errorf("a missing .lint: %v %v", c, err)
	}
}

// Every rule says what it checks, and the version names dashboard-linter's
// release.
func TestRulesDescribed(t *testing.T) {
	for _, r := range Rules() {
		if r.Name == "" || r.Description == "" || r.check == nil {
			t.Errorf("rule %+v", r)
		}
	}
	if v := VersionString(); !strings.Contains(v, Version) || !strings.Contains(v, "dashboard-linter v0.2.0") {
		t.Errorf("version %q", v)
	}
}
