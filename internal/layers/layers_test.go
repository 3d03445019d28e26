package layers

import (
	"os/exec"
	"sort"
	"strings"
	"testing"
)

// moduleGraph lists the module's packages and their direct imports from the
// module (tests excluded: a test may use any package to build fixtures).
func moduleGraph(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, Module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	g := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		p := strings.TrimPrefix(f[0], Module+"/")
		g[p] = nil
		for _, imp := range f[1:] {
			if rel, ok := strings.CutPrefix(imp, Module+"/"); ok {
				g[p] = append(g[p], rel)
			}
		}
	}
	return g
}

func TestModuleImportsPointOneWay(t *testing.T) {
	g := moduleGraph(t)
	if len(g) < 20 {
		t.Fatalf("go list found %d packages; want the whole module", len(g))
	}
	for _, v := range Check(g) {
		t.Error(v)
	}
}

// The check catches each kind of wrong import: a collector reaching into a
// source, the snapshot depending on more than the readings, a source
// importing the stats loop or the published snapshot, stats importing the
// collectors or a source (pkg/workload included: stats names workloads
// with pkg/workload/ident), a vocabulary package importing another that
// Only does not list (the workload names built on the snapshot), and an
// unplaced package.
func TestCheckFindsUpwardImports(t *testing.T) {
	g := map[string][]string{
		"internal/snapshot":     {"internal/sourcehealth"},
		"internal/bpfloader":    {"internal/stats", "pkg/cgroup", "internal/snapshot"},
		"pkg/cgroup":            {"pkg/model"},
		"internal/stats":        {"internal/collector", "internal/bpfloader", "pkg/model", "internal/snapshot", "pkg/workload", "pkg/workload/ident", "pkg/power/ipmi"},
		"internal/sourcehealth": {"pkg/reading"},
		"pkg/reading":           {"internal/sourcehealth"},
		"pkg/model":             nil,
		"internal/collector":    {"internal/bpfloader", "internal/snapshot", "pkg/workload/ident"},
		"pkg/workload":          {"pkg/workload/ident"},
		"pkg/workload/ident":    {"internal/snapshot"},
		"pkg/power/capmc":       {"internal/guestshare"},
		"internal/guestshare":   {"internal/snapshot"},
		"pkg/newthing":          nil,
		"cmd/exporter":          {"internal/stats", "internal/collector", "internal/guestshare"},
		"pkg/power/ipmi":        {"pkg/power"},
		"pkg/power":             {"pkg/reading"},
		"internal/cpulist":      nil,
	}
	got := Check(g)
	want := []string{
		"internal/bpfloader (sources) imports internal/stats (stats)",
		"internal/bpfloader imports internal/snapshot, the snapshot the loop publishes",
		"internal/collector imports internal/bpfloader: it may import only",
		"internal/snapshot imports internal/sourcehealth: it may import only [pkg/reading]",
		"internal/stats (stats) imports internal/collector (outputs)",
		"internal/stats imports internal/bpfloader, a source",
		"internal/stats imports pkg/workload, a source",
		"internal/stats imports pkg/power/ipmi, a source",
		"pkg/cgroup (sources) imports pkg/model (model)",
		"pkg/newthing is in no layer",
		"pkg/power/capmc (sources) imports internal/guestshare (outputs)",
		"pkg/reading (vocabulary) imports internal/sourcehealth (vocabulary)",
		"pkg/workload/ident imports internal/snapshot: it may import only [pkg/reading]",
	}
	if len(got) != len(want) {
		t.Fatalf("%d violations, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("violation %d: %q, want it to start %q", i, got[i], w)
		}
	}
}

// No source imports the snapshot the loop publishes: each package of the
// sources layer, given an import of internal/snapshot in a copy of the
// module's real graph, fails the check with that one violation, while
// the same package importing the readings (pkg/reading) passes (unless
// Only keeps it off them, as it keeps the units side). So the
// contract between sources and the loop is pkg/reading alone, whichever
// source a change touches.
func TestSourcesDoNotImportTheSnapshot(t *testing.T) {
	g := moduleGraph(t)
	if v := Check(g); len(v) != 0 {
		t.Fatalf("the module already breaks the rules: %v", v)
	}
	var sources []string
	for p := range g {
		if l, ok := LayerOf(p); ok && l == Sources {
			sources = append(sources, p)
		}
	}
	sort.Strings(sources)
	if len(sources) < 20 {
		t.Fatalf("found %d source packages; want every one of the module's", len(sources))
	}
	with := func(p, imp string) map[string][]string {
		c := make(map[string][]string, len(g))
		for k, v := range g {
			c[k] = v
		}
		c[p] = append(append([]string(nil), g[p]...), imp)
		return c
	}
	for _, p := range sources {
		got := Check(with(p, "internal/snapshot"))
		// The units side's Only lists refuse it first, in their own words.
		want := p + " imports internal/snapshot"
		if _, limited := Only[p]; !limited {
			want += ", the snapshot the loop publishes"
		}
		if len(got) != 1 || !strings.HasPrefix(got[0], want) {
			t.Errorf("%s importing internal/snapshot: violations %q, want one starting %q", p, got, want)
		}
		// The units side's Only lists keep it off the readings too;
		// every other source may name them.
		if only, limited := Only[p]; limited && !contains(only, "pkg/reading") {
			continue
		}
		if got := Check(with(p, "pkg/reading")); len(got) != 0 {
			t.Errorf("%s importing pkg/reading: %q, want none", p, got)
		}
	}
}
