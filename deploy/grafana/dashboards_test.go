package grafana

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/internal/dashlint"
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

// dashboardDirs are the directories of dashboards, each linted with its
// .lint file: the Prometheus dashboards and the units API's.
var dashboardDirs = []string{"dashboards", "units"}

// The dashboards pass every rule of internal/dashlint (those of Grafana's
// dashboard-linter that apply to Prometheus dashboards) as strictly as
// dashboard-linter's --strict: a warning fails too, and so does an entry
// of a .lint file that excludes nothing any more.
func TestDashboardLint(t *testing.T) {
	t.Log(dashlint.VersionString())
	for _, dir := range dashboardDirs {
		files, findings, unused, err := dashlint.Dir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(files) == 0 {
			t.Errorf("%s: no dashboard", dir)
		}
		for _, f := range files {
			for _, x := range findings[f] {
				switch {
				case x.Excluded:
					t.Logf("%s: %s", f, x)
				default:
					t.Errorf("%s: %s", f, x)
				}
			}
		}
		for _, u := range unused {
			t.Errorf("%s/%s: %s", dir, dashlint.ConfigFile, u)
		}
	}
}

// A copy of each Prometheus dashboard with one breach of one rule planted
// fails the lint, with the directory's .lint file in force: for every
// rule, so no exclusion silences a rule for the whole dashboard unawares.
func TestDashboardLintFailsPlantedErrors(t *testing.T) {
	lint, err := os.ReadFile(filepath.Join("dashboards", dashlint.ConfigFile))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	ds, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		src, err := FS.ReadFile("dashboards/" + d.File)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range dashlint.Rules() {
			planted, err := dashlint.Plant(r.Name, src)
			if err != nil {
				t.Errorf("%s: %v", d.File, err)
				continue
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, d.File), planted, 0o644); err != nil {
				t.Fatal(err)
			}
			if lint != nil {
				if err := os.WriteFile(filepath.Join(dir, dashlint.ConfigFile), lint, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, findings, _, err := dashlint.Dir(dir)
			if err != nil {
				t.Fatal(err)
			}
			caught := false
			for _, x := range findings[filepath.Join(dir, d.File)] {
				caught = caught || (x.Rule == r.Name && !x.Excluded)
			}
			if !caught {
				t.Errorf("%s with a breach of %s planted: not caught (%v)", d.File, r.Name, findings)
			}
		}
	}
}

// wattrace's own conventions beyond the linter's: a uid, title and
// description per dashboard, unique panel ids and titles, every query
// variable's All a regex that matches every value (.+), and no panel lost.
func TestDashboardConventions(t *testing.T) {
	ds, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for _, d := range ds {
		if d.UID == "" || d.Title == "" || d.Description == "" {
			t.Errorf("%s: uid, title and description are required", d.File)
		}
		for _, v := range d.Templating.List {
			if v.Type == "query" && v.AllValue != ".+" {
				t.Errorf("%s: variable %s: allValue %q, want .+ (a regex that matches every value)", d.File, v.Name, v.AllValue)
			}
		}
		ids, titles := map[int]bool{}, map[string]bool{}
		for _, p := range d.AllPanels() {
			if ids[p.ID] {
				t.Errorf("%s: panel %q: duplicate id %d", d.File, p.Title, p.ID)
			}
			if titles[p.Title] {
				t.Errorf("%s: panel %q: duplicate title", d.File, p.Title)
			}
			ids[p.ID], titles[p.Title] = true, true
		}
		n += len(d.Queries())
	}
	t.Logf("%d dashboards, %d queries", len(ds), n)
	if n < 40 {
		t.Errorf("only %d queries: panels lost?", n)
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
