// Package layers states the direction data flows in wattrace (sources →
// readings → stats, with model → snapshot → collectors) as import rules,
// and checks a package graph against them. Its test runs the check over the module, so
// an import that points upward fails the build's tests.
package layers

import (
	"fmt"
	"sort"
	"strings"
)

// Module is the module path; rules name packages relative to it.
const Module = "github.com/wattrace/wattrace"

// Layer ranks a package; a package imports only packages of lower layers,
// and of its own layer only where the layer allows it.
type Layer int

const (
	// Base: small helpers with no module imports (parsing the kernel's
	// numbers).
	Base Layer = iota
	// Vocabulary: types everyone shares: the readings the sources hand
	// the loop (pkg/reading, the contract between them) and their
	// validation, the workload names.
	Vocabulary
	// Sources: what reads the kernel, the meters and the workload
	// managers. They produce vocabulary types and may use each other
	// (bpfloader uses cgroup).
	Sources
	// Model: the split of a zone's energy among consumers, and the idle
	// models; pure arithmetic that no source needs.
	Model
	// Snapshot: what the stats loop publishes. It ranks above the
	// sources, so no source can import it: a source hands the loop
	// readings, never the published snapshot.
	Snapshot
	// Stats: the loop that turns readings into the snapshot.
	Stats
	// Outputs: the collectors and the Alloy targets; collectors read the
	// snapshot only.
	Outputs
	// Commands: the binaries that wire everything together, and load the
	// settings every package declares.
	Commands
)

var layerNames = [...]string{"base", "vocabulary", "sources", "model", "snapshot", "stats", "outputs", "commands"}

func (l Layer) String() string { return layerNames[l] }

// sameLayerOK lists the layers whose packages may import each other; in
// other layers a package imports one of its own layer only where Only
// names it.
var sameLayerOK = map[Layer]bool{Sources: true}

// Layers places every package of the module, by its path relative to the
// module root; a path ending in "/..." covers the packages under it. A new
// package must be placed here, or the check fails.
var Layers = map[string]Layer{
	"internal/decimal": Base,
	// Declared settings: what every block of settings (a meter's, a
	// collector's, the loop's, the GPU sources', …) declares beside the
	// code that reads it.
	"internal/setting": Base,
	"internal/procpid": Base,

	// The contract between the sources and the loop: what a source
	// reads, in the shape the loop takes it, and its validation.
	"pkg/reading": Vocabulary,
	// A source's health tally and the interface that reports it.
	"internal/sourcehealth": Vocabulary,
	"internal/cpulist":      Vocabulary,
	// Loading and decoding the declared settings, the logger and main's
	// shape, shared by both programs.
	"internal/cli": Vocabulary,
	// What the programs' tests share about settings loaded through
	// internal/cli (see Only).
	"internal/cli/clitest": Vocabulary,
	"internal/testenv":     Vocabulary,
	"internal/layers":      Vocabulary,
	// The Grafana dashboard linter (the rules of Grafana's
	// dashboard-linter): a tool, no module imports.
	"internal/dashlint": Vocabulary,
	// The units store's vocabulary (Unit, Filter, Reader): no imports.
	"pkg/units": Vocabulary,
	// The workload vocabulary (Kind, Identity, the kinds table): what the
	// stats loop, the collectors and Alloy name workloads with; finding
	// them (pkg/workload) is a source.
	"pkg/workload/ident": Vocabulary,

	"internal/bpfloader":   Sources,
	"pkg/cgroup":           Sources,
	"internal/cgroupstats": Sources,
	"internal/procfs":      Sources,
	"internal/profiling":   Sources,
	"pkg/power":            Sources,
	"pkg/power/...":        Sources,
	"pkg/workload":         Sources,
	"pkg/workload/...":     Sources,
	"pkg/gpu":              Sources,
	"pkg/gpu/...":          Sources,
	"pkg/carbon":           Sources,
	// The node's energy sources composed once, with the exclusions
	// between them, for the exporter and measure alike.
	"internal/compose": Sources,
	// The units store, its feeders (TSDB updater, Slurm) and its API: they
	// read the TSDB and the managers, never the exporter's loop (see Only).
	"internal/units/...": Sources,
	// The rest of the sources' code that is no API: GPU composition per
	// node and the fakes tests build sources from.
	"internal/gpu/...":      Sources,
	"internal/power/...":    Sources,
	"internal/workload/...": Sources,

	"pkg/model": Model,

	// The published snapshot; it carries pkg/reading's types on.
	"internal/snapshot": Snapshot,

	"internal/stats": Stats,
	// measure is a one-shot loop of its own: sources and model, no stats.
	"internal/measure": Stats,

	"internal/collector": Outputs,
	"internal/alloy":     Outputs,
	// Each VM's energy, written for its guest (reads snapshots only).
	"internal/guestshare": Outputs,

	"cmd/...":     Commands,
	"scripts/...": Commands,
	// The dashboards and rules, embedded for the tests that check them.
	"deploy/...": Commands,
}

// Only limits what some packages may import from the module, beyond their
// layer: the collectors read the snapshot (and the readings it carries)
// and name workloads, nothing else; the snapshot depends on the readings
// only.
var Only = map[string][]string{
	// internal/setting carries no data: each collector declares its own
	// settings with it.
	"internal/collector": {"internal/snapshot", "pkg/reading", "pkg/workload/ident", "internal/setting"},
	"internal/snapshot":  {"pkg/reading"},
	"internal/dashlint":  {},
	// Vocabulary packages build on each other only where listed here.
	"internal/sourcehealth": {"pkg/reading"},
	"pkg/workload/ident":    {"pkg/reading"},
	"internal/cli/clitest":  {"internal/cli"},
	// The units side reads what the exporters published to the TSDB; it
	// must not reach into the exporter's sources, loop or snapshot. The
	// store, the updater and the feeders declare wattrace-api's settings
	// beside the code that reads them (internal/setting carries no data).
	"pkg/units":              {},
	"internal/units/store":   {"pkg/units", "internal/setting"},
	"internal/units/slurm":   {"pkg/units", "internal/units/feed", "internal/setting"},
	"internal/units/pbs":     {"pkg/units", "internal/units/feed", "internal/setting"},
	"internal/units/feed":    {"pkg/units"},
	"internal/units/updater": {"pkg/units", "internal/units/store", "pkg/reading", "internal/setting"},
	// The API and acct speak the vocabulary only: the store is reached
	// through units.Reader, the server through HTTP.
	"internal/units/api":  {"pkg/units", "internal/units/access"},
	"internal/units/acct": {"pkg/units", "internal/units/access"},
	// Who a request is: no module imports, so any server or guard can
	// use it.
	"internal/units/access":    {},
	"internal/units/unitstest": {"pkg/units", "internal/units/store"},
	// The query guard speaks PromQL and HTTP only: who asks and what
	// they own come through its own interfaces.
	"internal/units/guard": {},
}

// NoSources lists packages that must import no package of the sources
// layer, although it ranks below them: the stats loop hears from the
// sources only through the vocabulary (pkg/reading's readings,
// sourcehealth, and pkg/workload/ident for workload names), so
// it and its tests' fakes need no source, and the BPF loader's
// cilium/ebpf stays out of it. There are no exceptions: what a source and
// the loop both need to name belongs in a vocabulary package.
var NoSources = map[string]bool{
	"internal/stats": true,
}

// LayerOf returns a package's layer.
func LayerOf(rel string) (Layer, bool) {
	if l, ok := Layers[rel]; ok {
		return l, true
	}
	best, found := "", false
	var layer Layer
	for p, l := range Layers {
		if prefix, ok := strings.CutSuffix(p, "/..."); ok && strings.HasPrefix(rel, prefix+"/") && len(prefix) > len(best) {
			best, layer, found = prefix, l, true
		}
	}
	return layer, found
}

// Check returns every rule the graph breaks. graph maps each package of the
// module (relative path) to the module packages it imports directly.
func Check(graph map[string][]string) []string {
	var out []string
	pkgs := make([]string, 0, len(graph))
	for p := range graph {
		pkgs = append(pkgs, p)
	}
	sort.Strings(pkgs)
	for _, p := range pkgs {
		lp, ok := LayerOf(p)
		if !ok {
			out = append(out, fmt.Sprintf("%s is in no layer: place it in internal/layers.Layers", p))
			continue
		}
		only, limited := Only[p]
		noSources := NoSources[p]
		for _, imp := range graph[p] {
			li, ok := LayerOf(imp)
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("%s imports %s, which is in no layer", p, imp))
			case limited && !contains(only, imp):
				out = append(out, fmt.Sprintf("%s imports %s: it may import only %v from the module", p, imp, only))
			case lp == Sources && li == Snapshot:
				out = append(out, fmt.Sprintf("%s imports %s, the snapshot the loop publishes: a source hands the loop readings (pkg/reading), never the published snapshot", p, imp))
			case li > lp, li == lp && !sameLayerOK[lp] && !(limited && contains(only, imp)):
				out = append(out, fmt.Sprintf("%s (%s) imports %s (%s): imports point from sources towards the collectors, never back", p, lp, imp, li))
			case noSources && li == Sources:
				out = append(out, fmt.Sprintf("%s imports %s, a source: sources reach it only through the vocabulary (pkg/reading)", p, imp))
			}
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
