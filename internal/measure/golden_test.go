package measure

import (
	"bytes"
	"flag"
	"math"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run with -update after checking):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// goldenReport is a fixed two-run report with a measured package and an
// estimated platform zone, built through the attribution and the summary
// (not by hand) so the golden files follow the arithmetic.
func goldenReport(t *testing.T) Report {
	t.Helper()
	a := &attribution{meter: fakeMeter{}, policy: "cpu", gramsPerKWh: 436,
		baseline: Baseline{Source: "measured", Seconds: 2, Watts: map[string]float64{"package-0": 5, "platform": 40}}}
	var runs []Run
	for i, c := range []struct{ wall, cmd, node, pkg, plat float64 }{
		{10, 9.5, 12, 150, 700},
		{10.5, 9.7, 12.5, 160, 730},
	} {
		r := rawRun(c.wall, c.cmd, c.node, map[string]float64{"rapl/package-0": c.pkg, "estimator/platform": c.plat})
		r.user, r.sys = c.cmd-0.25, 0.25
		run, err := a.run(i+1, r)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, run)
	}
	return Report{Schema: Schema, Command: []string{"make", "-j2"}, Accounting: "bpf", Cgroup: PlaceChild,
		Hierarchy: "cpuacct", Meter: "rapl+estimator", IdlePolicy: "cpu", Baseline: a.baseline,
		GramsPerKWh: 436, CarbonSource: "constant", Runs: runs, Summary: summarize(runs)}
}

func TestGoldenTable(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, FormatTable, goldenReport(t)); err != nil {
		t.Fatal(err)
	}
	golden(t, "report.txt", b.Bytes())
}

func TestGoldenJSON(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, FormatJSON, goldenReport(t)); err != nil {
		t.Fatal(err)
	}
	golden(t, "report.json", b.Bytes())
}

func TestGoldenCSV(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, FormatCSV, goldenReport(t)); err != nil {
		t.Fatal(err)
	}
	golden(t, "report.csv", b.Bytes())
}

// Interrupted: the partial report is marked.
func TestGoldenInterrupted(t *testing.T) {
	rep := goldenReport(t)
	rep.Runs = rep.Runs[:1]
	rep.Runs[0].Interrupted, rep.Runs[0].ExitStatus, rep.Runs[0].Signals = true, 130, []string{"interrupt"}
	rep.Summary = summarize(rep.Runs)
	var b bytes.Buffer
	if err := Write(&b, FormatTable, rep); err != nil {
		t.Fatal(err)
	}
	golden(t, "interrupted.txt", b.Bytes())
}

// The figures behind the golden files, checked by hand: run 1's package
// has 150 J over 10 s with a 5 W baseline, so 50 J idle and 100 J
// dynamic, of which the command's CPU share 9.5/12.
func TestGoldenFigures(t *testing.T) {
	r := goldenReport(t).Runs[0]
	for _, z := range r.Zones {
		if z.Zone != "package" {
			continue
		}
		if math.Abs(z.NodeIdleJ-50) > 1e-9 || math.Abs(z.DynamicJ-100*9.5/12) > 1e-9 || math.Abs(z.IdleJ-50*9.5/12) > 1e-9 {
			t.Errorf("package %+v", z)
		}
	}
	// The platform zone is the total when present (it covers the package).
	if want := 9.5 / 12 * 700; math.Abs(r.EnergyJ-want) > 1e-9 {
		t.Errorf("energy %g J, want the platform's share %g J", r.EnergyJ, want)
	}
}
