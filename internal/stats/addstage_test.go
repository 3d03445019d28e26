package stats

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// addedStage is a new stage, written as a newcomer would: one file, its
// dependencies from deps, its work in the phases it takes part in. It
// credits each cgroup a joule of zone "added" per interval, through the
// same credits as the split, and reports how often it ran.
const addedStage = `package stats

import (
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/internal/snapshot"
)

type added struct {
	phases
	led     consumers
	credits *credits
	runs    uint64
}

func makeAdded(d *deps) (stage, error) {
	return &added{led: d.consumers, credits: d.credits}, nil
}

func (a *added) settle(iv *interval) {
	if iv.baseline {
		return
	}
	for w := range a.led.cgroups() {
		a.credits.consumer(w, snapshot.ZoneSeries{Zone: "added"}, 1, 0)
	}
	a.runs++
}

func (a *added) publish(_ *interval, s *snapshot.Snapshot) {
	s.Meters = append(s.Meters, reading.SourceHealth{Source: "added", Up: true, Reads: a.runs})
}
`

// addedTest runs a loop of the copied package with fakes and checks the
// added stage's work in its snapshots.
const addedTest = `package stats

import (
	"context"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
)

type src struct{ r reading.Usage }

func (s *src) Read() (reading.Usage, error) { return s.r, nil }
func (s *src) Mode() string                 { return "procfs" }
func (s *src) Close() error                 { return nil }
func (s *src) Health() []reading.SourceHealth { return nil }

type meter struct{ j float64 }

func (m *meter) Name() string    { return "rapl" }
func (m *meter) Estimated() bool { return false }
func (m *meter) Read(context.Context) ([]reading.ZoneSample, error) {
	return []reading.ZoneSample{{Zone: "package", Socket: 0, Joules: m.j}}, nil
}

type paths map[uint64]string

func (p paths) Path(id uint64) (string, bool) { s, ok := p[id]; return s, ok }

func TestAddedStage(t *testing.T) {
	s, m := &src{}, &meter{}
	l, err := New(Config{Interval: time.Second, IdlePolicy: "none", CPUs: 1}, s, m, paths{1: "/a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	for k := 0; k < 4; k++ {
		s.r.Cgroups = []reading.CgroupUsage{{ID: 1, CPUNs: uint64(k) * 5e8}}
		m.j = float64(k) * 10
		l.Step(t0.Add(time.Duration(k) * time.Second))
	}
	snap := l.Snapshot()
	var runs uint64
	for _, h := range snap.Meters {
		if h.Source == "added" {
			runs = h.Reads
		}
	}
	if runs != 3 {
		t.Errorf("added stage ran %d intervals, want 3", runs)
	}
	if len(snap.Cgroups) != 1 {
		t.Fatalf("%d cgroups, want 1", len(snap.Cgroups))
	}
	a := snap.Cgroups[0]
	if got := a.Energy.Get("added").DynamicJ; got != 3 {
		t.Errorf("cgroup %s has %v J of zone added, want 3", a.Cgroup, got)
	}
	if got := a.Energy.Get("package").DynamicJ; got != 30 {
		t.Errorf("cgroup %s has %v J of zone package, want 30 (the other stages unchanged)", a.Cgroup, got)
	}
}
`

// Adding a stage is one file plus one line in stageList: a copy of this
// package with a new stage's file and that line builds, runs the stage
// and publishes its figures; the same copy without the line does not run
// it (so nothing else wires stages).
func TestAddStageIsOneFileAndOneLine(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a copy of the package")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command, to build the copy: %v", err)
	}
	if err := os.MkdirAll("testdata", 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("testdata", "addstage-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.RemoveAll(dir)
		os.Remove("testdata") // only when empty
	})
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("added.go", addedStage)
	write("added_test.go", addedTest)
	run := func() (string, error) {
		cmd := exec.Command(goBin, "test", "-count=1", "-run", "^TestAddedStage$", "./"+filepath.ToSlash(dir))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	// Without the line: the file alone does nothing.
	if out, err := run(); err == nil || !strings.Contains(out, "added stage ran 0 intervals") {
		t.Fatalf("without its line in stageList the stage ran or the copy failed otherwise: %v\n%s", err, out)
	}

	// With it.
	list, err := os.ReadFile("stages.go")
	if err != nil {
		t.Fatal(err)
	}
	const last = "\t\tmakeEmissions,"
	i := strings.Index(string(list), last)
	if i < 0 {
		t.Fatalf("stages.go has no %q line", last)
	}
	i += strings.Index(string(list[i:]), "\n") + 1
	edited := string(list[:i]) + "\t\tmakeAdded,\n" + string(list[i:])
	if strings.Count(edited, "\n") != strings.Count(string(list), "\n")+1 {
		t.Fatal("the edit is not one line")
	}
	write("stages.go", edited)
	if out, err := run(); err != nil {
		t.Fatalf("with its line the added stage failed: %v\n%s", err, out)
	}
}
