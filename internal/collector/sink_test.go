package collector

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// gatherText is what the registry's path serves: Gather, then expfmt's
// text encoder, family by family.
func gatherText(t testing.TB, e *Exporter) ([]byte, int) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e)
	mfs, err := reg.Gather()
	errs := 0
	if err != nil {
		var me prometheus.MultiError
		if !errors.As(err, &me) {
			t.Fatal(err)
		}
		errs = len(me)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes(), errs
}

// durations are the one figure two renderings of a snapshot differ in.
var durations = regexp.MustCompile(`(?m)^(wattrace_scrape_collector_duration_seconds\{[^}]*\}) .*$`)

func sameText(t *testing.T, e *Exporter) {
	t.Helper()
	want, wantErrs := gatherText(t, e)
	got, fams, errs := e.AppendText(nil)
	if g, w := durations.ReplaceAll(got, []byte("$1 D")), durations.ReplaceAll(want, []byte("$1 D")); !bytes.Equal(g, w) {
		t.Errorf("AppendText differs from Gather and the text encoder:\n%s", firstDiff(w, g))
	}
	t.Logf("%d families, %d bytes, %d errors", len(fams), len(got), len(errs))
	if len(errs) != wantErrs {
		t.Errorf("AppendText reported %d errors (%v), Gather %d", len(errs), errs, wantErrs)
	}
	// The spans tile the buffer in name order, each one family.
	end := 0
	for i, f := range fams {
		if f.Start != end || (i > 0 && fams[i-1].Name >= f.Name) {
			t.Fatalf("family %d (%s) at %d..%d after %d: not in order or not contiguous", i, f.Name, f.Start, f.End, end)
		}
		if !bytes.HasPrefix(got[f.Start:f.End], []byte("# HELP "+f.Name+" ")) {
			t.Fatalf("family %s's span starts %q", f.Name, got[f.Start:min(f.End, f.Start+60)])
		}
		end = f.End
	}
	if end != len(got) || len(fams) < 2 {
		t.Fatalf("%d families end at %d of %d bytes", len(fams), end, len(got))
	}
}

// The text path is the registry's output byte for byte: every family the
// exporter has, label values that need escaping or are not UTF-8, merged
// and repeated series, and no snapshot at all.
func TestAppendTextIsGather(t *testing.T) {
	t.Run("every family", func(t *testing.T) {
		sameText(t, fullExporter(t, testSnapshot()))
	})
	t.Run("odd labels and repeats", func(t *testing.T) {
		snap := testSnapshot()
		odd := []string{`quo"te`, `back\slash`, "new\nline", "bad\xffutf8", "", "ünï", "{}=,"}
		for i, v := range odd {
			w := snap.Workloads[0]
			w.Labels = []string{strconv.Itoa(900 + i), v, "1000", "n1", v}
			snap.Workloads = append(snap.Workloads, w)
			snap.Cgroups = append(snap.Cgroups, &snapshot.Consumer{Cgroup: "/odd/" + v, CgroupID: uint64(900 + i), CPUSeconds: float64(i), Alive: true,
				Energy: snapshot.Energy{{Zone: "package", ZoneJoules: snapshot.ZoneJoules{DynamicJ: float64(i)}}}})
		}
		// A workload whose labels repeat another's: both paths drop the
		// second's series, with an error each.
		// Its figures differ, so a path keeping the wrong one of the two
		// shows.
		rep := snap.Workloads[1]
		rep.CPUSeconds, rep.ContextSwitches = 99, 99
		rep.Energy = snapshot.Energy{{Zone: "package", ZoneJoules: snapshot.ZoneJoules{DynamicJ: 99, IdleJ: 99}}}
		snap.Workloads = append(snap.Workloads, rep)
		sameText(t, fullExporter(t, snap))
	})
	t.Run("defaults", func(t *testing.T) {
		sameText(t, newExporter(t, testSnapshot(), Options{Enabled: on(NameNode, NameCgroup), Levels: ident.Levels()}))
	})
	t.Run("no snapshot", func(t *testing.T) {
		sameText(t, newExporter(t, nil, Options{Enabled: on(NameNode, NameCgroup), Levels: ident.Levels()}))
	})
	t.Run("200 jobs", func(t *testing.T) {
		sameText(t, jobsExporter(t, 200))
	})
}

// A label count that does not match the family, or a type that is not the
// family's (its first sample's), is an error, and the sample is left out,
// as Gather leaves it out.
func TestAppendTextWrongLabelCount(t *testing.T) {
	d := newDesc("test", "x", "X.", "a", "b")
	tf := newTextFamilies()
	out := &sink{text: tf}
	out.add(d, prometheus.GaugeValue, 1, "only")
	out.add(d, prometheus.CounterValue, 2, "b", "a")
	out.add(d, prometheus.GaugeValue, 3, "a", "b")
	buf, fams := tf.appendTo(nil)
	if len(tf.errs) != 2 || len(fams) != 1 {
		t.Fatalf("errors %v, families %v: want two errors and one family", tf.errs, fams)
	}
	if want := "# HELP wattrace_test_x X.\n# TYPE wattrace_test_x counter\nwattrace_test_x{a=\"b\",b=\"a\"} 2\n"; string(buf) != want {
		t.Errorf("got\n%s\nwant\n%s", buf, want)
	}
}

// jobsExporter is the footprint harness's node as the collectors see it:
// n Slurm jobs with energy, grams and memory figures, a cgroup each.
func jobsExporter(t testing.TB, n int) *Exporter {
	snap := testSnapshot()
	snap.Workloads, snap.Cgroups = nil, nil
	for i := range n {
		r := &reading.Resources{CPUUserSeconds: float64(i) * 1.25, CPUSystemSeconds: 0.5, MemoryCurrent: uint64(i+1) << 20,
			MemoryLimit: reading.Unlimited, MemoryRSS: uint64(i+1) << 18, MemoryCache: uint64(i+1) << 19, Tasks: 5,
			Available: reading.FieldCPU | reading.FieldMemoryCurrent | reading.FieldMemoryLimit | reading.FieldMemoryRSS | reading.FieldMemoryCache | reading.FieldTasks}
		id := strconv.Itoa(1000 + i)
		energy := snapshot.Energy{{Zone: "package", Source: "rapl", ZoneJoules: snapshot.ZoneJoules{DynamicJ: float64(i) * 0.37, IdleJ: 1.5}}}
		snap.Workloads = append(snap.Workloads, snapshot.Workload{Level: string(ident.KindJob), Manager: "slurm",
			Labels: []string{id, "user" + strconv.Itoa(i%7), strconv.Itoa(1000 + i%7), "n1", ""}, Resources: r,
			CPUSeconds: float64(i) * 1.75, ContextSwitches: uint64(i * 3), Alive: true, Cgroups: 1, Energy: energy,
			Grams: snapshot.Emissions{{Provider: "constant", Zone: "package", DynamicG: float64(i) * 0.01, IdleG: 0.2}}})
		snap.Cgroups = append(snap.Cgroups, &snapshot.Consumer{Cgroup: fmt.Sprintf("/slurm/uid_1000/job_%s/step_batch", id), CgroupID: uint64(5000 + i),
			CPUSeconds: float64(i) * 1.75, Alive: true, InWorkload: true, Energy: energy})
	}
	e, err := New(fixedSource{snap}, Options{Enabled: on(NameNode, NameCgroup), Levels: ident.Levels(), Emissions: true, MeterHealth: true})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// BenchmarkRender200Jobs renders the footprint harness's 200 jobs in the
// text format both ways: through the registry (Gather, then the text
// encoder) and through AppendText.
func BenchmarkRender200Jobs(b *testing.B) {
	e := jobsExporter(b, 200)
	b.Run("gather", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			gatherText(b, e)
		}
	})
	b.Run("text", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			buf, _, _ = e.AppendText(buf[:0])
		}
	})
}

// firstDiff shows the first line two texts differ in, with its number.
func firstDiff(want, got []byte) string {
	w, g := bytes.Split(want, []byte("\n")), bytes.Split(got, []byte("\n"))
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl []byte
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if !bytes.Equal(wl, gl) {
			return fmt.Sprintf("line %d:\n  want %q\n  got  %q", i+1, wl, gl)
		}
	}
	return "the same lines"
}
