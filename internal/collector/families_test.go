package collector

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// family is one metric family's name, type and label names.
type family struct {
	typ    string
	labels string // sorted, comma-separated; "" for none
}

func normLabels(ls []string) string {
	out := make([]string, 0, len(ls))
	for _, l := range ls {
		if l = strings.TrimSpace(strings.Trim(strings.TrimSpace(l), "`")); l != "" && l != "—" && l != "-" {
			out = append(out, l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// fullRegistry exposes every family: all collectors on, idle attributed,
// BPF statistics present.
func fullRegistry(t *testing.T) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(fullExporter(t, testSnapshot()))
	return reg
}

// fullExporter exports every family of snap, with every probe and
// resource figure made non-zero.
func fullExporter(t *testing.T, snap *snapshot.Snapshot) *Exporter {
	t.Helper()
	// Every probe figure non-zero on every cgroup and workload: an all-zero
	// family is left out.
	snap.Estimates = []reading.Estimate{{ZoneID: reading.ZoneID{Name: "platform", Socket: -1}, Source: "estimator",
		Watts: 300, LowerW: 250, UpperW: 380, Curve: "server", Tier: "cpu", CPU: "xeon gold 6248", Arch: "Cascade Lake", Coefficients: "SPECpower_ssj2008 fit (cpu tier)"}}
	full := reading.ProbeStats{}
	for _, f := range full.Fields() {
		*f = 1
	}
	for i := range snap.Cgroups {
		p := full
		snap.Cgroups[i].Probes = &p
	}
	for i := range snap.Workloads {
		p := full
		snap.Workloads[i].Probes = &p
		// Likewise every resource field: all-zero ones are left out.
		r := *testResources()
		r.MemorySwap, r.PSI[reading.PSIMemory].FullSeconds = 1, 1
		snap.Workloads[i].Resources = &r
	}
	e := newExporter(t, withEmissions(snap), Options{Enabled: on(NameNode, NameCgroup, NameProcess, NameProbes, NamePerf, NameBPFStats, NameGPU),
		Settings:       Settings{NameProcess: &ProcessSettings{Top: 20}, NameProbes: &probesSettings{PerCgroup: true, SoftirqWorkloads: true}},
		IdleAttributed: true, Levels: ident.Levels(), MeterHealth: true, Emissions: true,
		Programs: []ProgramStatsSource{fakePrograms{stats: []reading.ProgramStat{{Name: "handle_switch", RunTime: time.Millisecond, RunCount: 3}}}}})
	return e
}

func exposed(t *testing.T) map[string]family {
	t.Helper()
	mfs, err := fullRegistry(t).Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]family{}
	for _, mf := range mfs {
		labels := map[string]bool{}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = true
			}
		}
		var ls []string
		for l := range labels {
			ls = append(ls, l)
		}
		out[mf.GetName()] = family{typ: strings.ToLower(mf.GetType().String()), labels: normLabels(ls)}
	}
	return out
}

func golden(t *testing.T) map[string]family {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "families.golden"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]family{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 || len(fields) > 3 {
			t.Fatalf("families.golden: malformed line %q", line)
		}
		fam := family{typ: fields[1]}
		if len(fields) == 3 {
			fam.labels = normLabels(strings.Split(fields[2], ","))
		}
		out[fields[0]] = fam
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// docTable parses the metrics reference table of a Markdown file: rows of
// the form | `name` | type | `label`, `label` | meaning |.
func docTable(t *testing.T, path string) map[string]family {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]family{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "| `wattrace_") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 4 {
			t.Errorf("%s: metrics table row needs family, type, labels, meaning: %q", path, line)
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[0]), "`")
		labels := strings.Split(cells[2], ",")
		// A row for wattrace_<level>_x documents the family at every
		// workload level, with "the level's labels" standing for the
		// level's label names.
		names := map[string][]string{name: labels}
		if strings.Contains(name, "<level>") {
			names = map[string][]string{}
			for _, l := range ident.Levels() {
				ls := append([]string(nil), ident.LabelNames(l)...)
				for _, x := range labels {
					if !strings.Contains(x, "the level's labels") {
						ls = append(ls, x)
					}
				}
				names[strings.Replace(name, "<level>", string(l), 1)] = ls
			}
		}
		for n, ls := range names {
			if _, dup := out[n]; dup {
				t.Errorf("%s: %s listed twice", path, n)
			}
			out[n] = family{typ: strings.TrimSpace(cells[1]), labels: normLabels(ls)}
		}
	}
	if len(out) == 0 {
		t.Errorf("%s: no metrics table rows found", path)
	}
	return out
}

func compareFamilies(t *testing.T, what string, got, want map[string]family) {
	t.Helper()
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			t.Errorf("%s: missing %s (%s; labels %q)", what, name, w.typ, w.labels)
		case g != w:
			t.Errorf("%s: %s is %s with labels %q, want %s with labels %q", what, name, g.typ, g.labels, w.typ, w.labels)
		}
	}
	for name, g := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s: %s (%s; labels %q) is not in families.golden", what, name, g.typ, g.labels)
		}
	}
}

func TestFamiliesGolden(t *testing.T) {
	compareFamilies(t, "exposed", exposed(t), golden(t))
}

// TestDocsMatchGolden keeps the documented metrics reference in step with
// the code: a family added, renamed or relabelled fails here until both
// documents are updated.
func TestDocsMatchGolden(t *testing.T) {
	want := golden(t)
	for _, doc := range []string{"../../README.md", "../../docs/metrics.md"} {
		compareFamilies(t, doc, docTable(t, doc), want)
	}
}

// TestPromtoolCheckMetrics runs the scrape text through promtool's linter
// (promlint, in process), which enforces the naming conventions (units,
// _total, help text).
func TestPromtoolCheckMetrics(t *testing.T) {
	mfs, err := fullRegistry(t).Gather()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Promlint(t, buf.Bytes())
}
