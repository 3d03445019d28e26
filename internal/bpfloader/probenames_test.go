package bpfloader

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/pkg/reading"
)

// Every place that lists the probes lists probeDefs' (ProbeNames), so a
// probe added to probeDefs without its docs, its families or its tests
// fails here, and a place that names a probe probeDefs lacks too. The
// disable error (LoadProbes), the help of collector.probes.disable
// (settings.go), and the tests that load
// every probe (TestProbesLoad, allButCounters, internal/stats'
// TestCPUClockDrivesAttribution, internal/collector's testSnapshot) are built
// from ProbeNames; what is written by hand is checked below.
func TestProbeNamesEverywhere(t *testing.T) {
	names := ProbeNames()
	if len(names) == 0 || !slices.Contains(names, reading.ProbeCounters) {
		t.Fatalf("ProbeNames() = %q", names)
	}
	doc, err := os.ReadFile("../../docs/probes.md")
	if err != nil {
		t.Fatal(err)
	}
	// docs/probes.md's probe table: every probe, in probeDefs' order.
	if got := tableColumn(t, string(doc), "| probe | hook(s) |"); !slices.Equal(got, names) {
		t.Errorf("docs/probes.md's probe table lists %q, want %q", got, names)
	}
	// Its cost table: every probe but counters, whose cost is per context
	// switch (the paragraph under the table, BenchmarkProbesCost), with
	// programs of that probe only.
	progs := map[string][]string{}
	for _, d := range probeDefs {
		for _, v := range d.variants {
			for _, h := range v {
				progs[d.name] = append(progs[d.name], h.prog)
			}
		}
	}
	costs := tableRows(t, string(doc), "| probe | program | one event costs |")
	seen := map[string]bool{}
	for _, row := range costs {
		p := strings.Trim(row[0], "`")
		if strings.HasPrefix(row[0], "all,") {
			continue // the weighted total
		}
		seen[p] = true
		for _, prog := range strings.Split(row[1], ",") {
			if prog = strings.Trim(strings.TrimSpace(prog), "`"); !slices.Contains(progs[p], prog) {
				t.Errorf("docs/probes.md's cost table: %s under probe %q, which has programs %q", prog, p, progs[p])
			}
		}
	}
	for _, n := range names {
		if want := n != reading.ProbeCounters; seen[n] != want {
			t.Errorf("docs/probes.md's cost table lists %s: %v, want %v", n, seen[n], want)
		}
	}
	for p := range seen {
		if !slices.Contains(names, p) {
			t.Errorf("docs/probes.md's cost table lists %q, which is no probe", p)
		}
	}
	// The flag's rows in README.md and docs/configuration.md say what its
	// help says (settings.go builds the help from ProbeNames).
	want := "Probes not to load: " + strings.Join(names, ", ") + "."
	for _, f := range []string{"../../README.md", "../../docs/configuration.md"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		row := ""
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "| `--collector.probes.disable` |") {
				row = line
			}
		}
		if !strings.Contains(row, "| "+want+" |") {
			t.Errorf("%s: the --collector.probes.disable row %q does not say %q", f, row, want)
		}
	}
	// reading.ProbeFamilies: a family for every probe but counters
	// (whose counts are the perf collector's), each of a probe.
	fam := map[string]bool{}
	for _, f := range reading.ProbeFamilies {
		if !slices.Contains(names, f.Probe) {
			t.Errorf("reading.ProbeFamilies: %s of %q, which is no probe", f.Name, f.Probe)
		}
		fam[f.Probe] = true
	}
	for _, n := range names {
		if want := n != reading.ProbeCounters; fam[n] != want {
			t.Errorf("reading.ProbeFamilies has a family of %s: %v, want %v", n, fam[n], want)
		}
	}
}

// tableRows returns the cells of the markdown table whose header line
// starts with header.
func tableRows(t *testing.T, doc, header string) [][]string {
	t.Helper()
	i := strings.Index(doc, "\n"+header)
	if i < 0 {
		t.Fatalf("no table %q", header)
	}
	var rows [][]string
	for n, line := range strings.Split(doc[i+1:], "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		if n < 2 { // the header and its rule
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		rows = append(rows, cells)
	}
	return rows
}

// tableColumn returns the first cells of a table's rows, backticks off.
func tableColumn(t *testing.T, doc, header string) []string {
	var out []string
	for _, r := range tableRows(t, doc, header) {
		out = append(out, strings.Trim(r[0], "`"))
	}
	return out
}
