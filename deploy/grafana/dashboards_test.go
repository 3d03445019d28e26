package grafana

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/internal/testenv"
)

// The three dashboards exist with the titles the README and the chart name.
func TestDashboardsLoad(t *testing.T) {
	ds, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range ds {
		got = append(got, d.File+"="+d.UID)
	}
	want := "wattrace-exporter.json=wattrace-exporter wattrace-node.json=wattrace-node wattrace-workloads.json=wattrace-workloads"
	if strings.Join(got, " ") != want {
		t.Errorf("dashboards %q, want %q", strings.Join(got, " "), want)
	}
}

var (
	selector    = regexp.MustCompile(`\b([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}`)
	metricName  = regexp.MustCompile(`\b(wattrace_[a-z0-9_]+|up|scrape_[a-z_]+|process_[a-z_]+)\b`)
	rangeSel    = regexp.MustCompile(`\[([^\]]*)\]`)
	counterCall = regexp.MustCompile(`(\w+)\(\s*[a-z0-9_]+_total\{`)
)

// lint applies the rules of Grafana's dashboard-linter that matter for
// these dashboards (template-datasource, template-job, template-instance,
// panel-datasource, panel-title-description, panel-units,
// target-job/instance, target-rate-interval, target-counter-agg) and
// returns one line per finding.
func lint(d *Dashboard) []string {
	var out []string
	bad := func(format string, a ...any) { out = append(out, d.File+": "+fmt.Sprintf(format, a...)) }
	vars := map[string]Variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if v, ok := vars["datasource"]; !ok || v.Type != "datasource" || string(v.Query) != `"prometheus"` {
		bad("no datasource variable of type datasource for prometheus")
	}
	for _, n := range []string{"job", "instance"} {
		v, ok := vars[n]
		if !ok || v.Type != "query" || !strings.Contains(string(v.Query), "label_values(") {
			bad("no %s variable from label_values", n)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" && v.AllValue != ".+" {
			bad("variable %s: allValue %q, want .+ (a regex that matches every value)", v.Name, v.AllValue)
		}
	}
	if d.UID == "" || d.Title == "" || d.Description == "" {
		bad("uid, title and description are required")
	}
	ids := map[int]bool{}
	titles := map[string]bool{}
	for _, p := range d.AllPanels() {
		where := fmt.Sprintf("panel %q", p.Title)
		if ids[p.ID] {
			bad("%s: duplicate id %d", where, p.ID)
		}
		ids[p.ID] = true
		if titles[p.Title] {
			bad("%s: duplicate title", where)
		}
		titles[p.Title] = true
		if p.Title == "" || p.Description == "" {
			bad("%s: needs a title and a description", where)
		}
		if p.FieldConfig.Defaults.Unit == "" {
			bad("%s: no unit", where)
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			bad("%s: datasource must be ${datasource}", where)
		}
		if len(p.Targets) == 0 {
			bad("%s: no query", where)
		}
		for _, tg := range p.Targets {
			if tg.Datasource == nil || tg.Datasource.UID != "${datasource}" {
				bad("%s %s: target datasource must be ${datasource}", where, tg.RefID)
			}
			out = append(out, lintExpr(d.File+": "+where+" "+tg.RefID, tg.Expr)...)
		}
	}
	return out
}

func lintExpr(where, expr string) []string {
	var out []string
	if expr == "" {
		return []string{where + ": empty query"}
	}
	// Every metric is selected with both job and instance matchers.
	sels := selector.FindAllStringSubmatch(expr, -1)
	selected := map[string]int{}
	for _, s := range sels {
		if !metricName.MatchString(s[1]) || metricName.FindString(s[1]) != s[1] {
			continue
		}
		selected[s[1]]++
		if !strings.Contains(s[2], `job=~"$job"`) || !strings.Contains(s[2], `instance=~"$instance"`) {
			out = append(out, fmt.Sprintf("%s: %s without job and instance matchers", where, s[1]))
		}
	}
	for _, m := range metricName.FindAllStringIndex(expr, -1) {
		if m[1] >= len(expr) || expr[m[1]] != '{' {
			// names inside label_values() and legends don't occur here;
			// a bare name is a selector without matchers.
			out = append(out, fmt.Sprintf("%s: %s selected without matchers", where, expr[m[0]:m[1]]))
		}
	}
	// Ranges are Grafana's, never hard-coded.
	for _, r := range rangeSel.FindAllStringSubmatch(expr, -1) {
		if r[1] != "$__rate_interval" && r[1] != "$__range" {
			out = append(out, fmt.Sprintf("%s: range [%s], want $__rate_interval or $__range", where, r[1]))
		}
	}
	// Counters only through rate or increase.
	for _, c := range counterCall.FindAllStringSubmatch(expr, -1) {
		if c[1] != "rate" && c[1] != "increase" {
			out = append(out, fmt.Sprintf("%s: counter inside %s(), want rate() or increase()", where, c[1]))
		}
	}
	if strings.Contains(expr, "_total{") && !strings.Contains(expr, "rate(") && !strings.Contains(expr, "increase(") {
		out = append(out, fmt.Sprintf("%s: counter used without rate() or increase()", where))
	}
	return out
}

// The dashboards pass the lint rules, and the rules catch what they are
// for (a panel without unit, a hard-coded range, a bare counter, a
// selector without the instance matcher).
func TestDashboardLint(t *testing.T) {
	ds, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, d := range ds {
		for _, f := range lint(d) {
			t.Error(f)
		}
		n += len(d.Queries())
	}
	t.Logf("%d dashboards, %d queries", len(ds), n)
	if n < 40 {
		t.Errorf("only %d queries: panels lost?", n)
	}

	broken := *ds[0]
	p := broken.AllPanels()[0]
	p.FieldConfig.Defaults.Unit = ""
	p.Targets = []Target{{RefID: "A", Datasource: p.Datasource,
		Expr: `sum(wattrace_node_energy_joules_total{job=~"$job"}) + rate(wattrace_stats_intervals_total{job=~"$job",instance=~"$instance"}[5m])`}}
	broken.Panels = []Panel{p}
	got := strings.Join(lint(&broken), "\n")
	for _, want := range []string{"no unit", "wattrace_node_energy_joules_total without job and instance matchers",
		"range [5m]", "counter inside sum()"} {
		if !strings.Contains(got, want) {
			t.Errorf("lint of a broken panel: no %q in\n%s", want, got)
		}
	}
}

// Every query is valid PromQL: with the variables substituted they go
// through promtool check rules as recording rules.
func TestDashboardQueriesParse(t *testing.T) {
	promtool := testenv.Tool(t, "promtool", "prometheus")
	ds, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboards\n    rules:\n")
	n := 0
	for _, d := range ds {
		for _, q := range d.Queries() {
			expr := Substitute(q.Expr, "1m", "1h", map[string]string{"job": ".+", "instance": ".+", "zone": ".+",
				"namespace": ".+", "pod": ".+", "job_id": ".+"})
			if strings.Contains(expr, "$") {
				t.Errorf("%s: unknown variable in %s", q, expr)
			}
			fmt.Fprintf(&b, "      - record: q%d\n        expr: %q\n", n, expr)
			n++
		}
	}
	f := filepath.Join(t.TempDir(), "queries.yml")
	if err := os.WriteFile(f, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "check", "rules", f).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules on the dashboards' queries: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("SUCCESS: %d rules found", n); !strings.Contains(string(out), want) {
		t.Errorf("promtool: no %q in %s", want, out)
	}
}

// Grafana's own dashboard-linter, where one is installed (on PATH or in
// GOBIN): it prints its version, passes every dashboard with --strict and
// fails a copy of one whose panel names a datasource by a fixed uid, which
// its panel-datasource-rule forbids.
//
// It can't be installed from this project's module proxy: v0.3.0 needs
// github.com/grafana/grafana/apps/dashboard at a pseudo-version the proxy
// refuses (403), and that module and grafana/loki/v3, also required, are
// AGPL, which this project does not take on even as a build tool. So
// the test skips where the linter is absent, CI included, and the checks
// above stand in for it; skipAllowed in internal/layers says so.
func TestGrafanaDashboardLinter(t *testing.T) {
	linter := findLinter()
	if linter == "" {
		t.Skip("dashboard-linter is not installed, and can't be from this module proxy (its grafana/apps/dashboard dependency is refused and AGPL)")
	}
	ver, err := exec.Command(linter, "--version").CombinedOutput()
	t.Logf("%s --version: %v %s", linter, err, strings.TrimSpace(string(ver)))
	ds, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		out, err := exec.Command(linter, "lint", "--strict", filepath.Join("dashboards", d.File)).CombinedOutput()
		if err != nil {
			t.Errorf("dashboard-linter lint %s: %v\n%s", d.File, err, out)
		}
	}
	src, err := os.ReadFile(filepath.Join("dashboards", ds[0].File))
	if err != nil {
		t.Fatal(err)
	}
	planted := strings.Replace(string(src), `"uid": "${datasource}"`, `"uid": "planted-fixed-uid"`, 1)
	if planted == string(src) {
		t.Fatalf("%s has no panel datasource ${datasource} to plant an error in", ds[0].File)
	}
	f := filepath.Join(t.TempDir(), ds[0].File)
	if err := os.WriteFile(f, []byte(planted), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(linter, "lint", "--strict", f).CombinedOutput(); err == nil {
		t.Errorf("dashboard-linter passed %s with a panel datasource of fixed uid:\n%s", ds[0].File, out)
	}
}

func findLinter() string {
	if p, err := exec.LookPath("dashboard-linter"); err == nil {
		return p
	}
	gobin, err := exec.Command("go", "env", "GOBIN", "GOPATH").Output()
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(gobin)), "\n")
	dirs := []string{}
	if len(lines) > 0 && lines[0] != "" {
		dirs = append(dirs, lines[0])
	}
	if len(lines) > 1 {
		dirs = append(dirs, filepath.Join(strings.Split(lines[1], ":")[0], "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "dashboard-linter")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// The workloads dashboard's job panels and job variable read PBS jobs
// (wattrace_pbs_job_*) wherever they read Slurm's, and a panel that groups
// Slurm jobs by job_id keeps sluid, so Slurm 26.05 jobs known only by
// their SLUID (empty job_id) are not summed into one.
func TestWorkloadsJobsCoverPBSAndSLUID(t *testing.T) {
	ds, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	var d *Dashboard
	for _, x := range ds {
		if x.UID == "wattrace-workloads" {
			d = x
		}
	}
	if d == nil {
		t.Fatal("no workloads dashboard")
	}
	slurm := regexp.MustCompile(`\bwattrace_job_(\w+)\{`)
	byJob := regexp.MustCompile(`by \(([^)]*\bjob_id\b[^)]*)\)`)
	n := 0
	for _, q := range d.Queries() {
		for _, m := range slurm.FindAllStringSubmatch(q.Expr, -1) {
			n++
			if !strings.Contains(q.Expr, "wattrace_pbs_job_"+m[1]+"{") {
				t.Errorf("%s reads wattrace_job_%s but not wattrace_pbs_job_%s: %s", q, m[1], m[1], q.Expr)
			}
		}
		for _, m := range byJob.FindAllStringSubmatch(q.Expr, -1) {
			if strings.Contains(q.Expr, "wattrace_job_") && !strings.Contains(m[1], "sluid") {
				t.Errorf("%s groups Slurm jobs by (%s) without sluid", q, m[1])
			}
		}
	}
	if n < 5 {
		t.Errorf("only %d Slurm job selectors: panels lost?", n)
	}
	for _, v := range d.Templating.List {
		if v.Name == "job_id" && !strings.Contains(string(v.Query), "wattrace_(job|pbs_job)_") {
			t.Errorf("job_id variable %s: not over Slurm and PBS jobs", v.Query)
		}
	}
}
