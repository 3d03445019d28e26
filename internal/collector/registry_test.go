package collector

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/internal/setting"
)

// The collectors table of docs/metrics.md lists every collector with a
// flag, its flag and its default, as the registry holds them.
func TestCollectorTable(t *testing.T) {
	b, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, "| `--collector.") {
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		rows[cells[0]] = cells
	}
	n := 0
	for _, r := range Registered() {
		if !r.Flag {
			continue
		}
		n++
		row, ok := rows[r.Name]
		if !ok {
			t.Errorf("docs/metrics.md: collector %s has no row", r.Name)
			continue
		}
		def := "off"
		if r.DefaultOn {
			def = "on"
		}
		if row[1] != "`--collector."+r.Name+"`" || row[2] != def {
			t.Errorf("docs/metrics.md: row %q, want flag --collector.%s default %s", row, r.Name, def)
		}
	}
	if len(rows) != n {
		t.Errorf("docs/metrics.md lists %d collectors, the registry has %d with a flag", len(rows), n)
	}
	if n != 7 {
		t.Errorf("%d flag collectors registered, want 7 (node, cgroup, process, bpf-stats, probes, perf, gpu)", n)
	}
}

// Enabling a collector nobody registered is a configuration error, not a
// silent no-op.
func TestUnknownCollector(t *testing.T) {
	if _, err := New(fixedSource{}, Options{Enabled: on("gpu-magic")}); err == nil || !strings.Contains(err.Error(), "gpu-magic") {
		t.Errorf("New with an unknown collector: %v, want an error naming it", err)
	}
}

// A collector's own settings: declared by its registration under
// collector.<name>.*, checked with the key named, their defaults where
// Options carry none.
func TestCollectorSettings(t *testing.T) {
	if top := settingsOf[ProcessSettings](Options{}, NameProcess).Top; top != 20 {
		t.Errorf("process.top without settings = %d, want the declared default 20", top)
	}
	err := Settings{NameProcess: &ProcessSettings{Top: -1}}.Check()
	if err == nil || !strings.Contains(err.Error(), `invalid value "-1" for collector.process.top`) {
		t.Errorf("check: %v", err)
	}
	s := &setting.Set{}
	st := Settings{}
	st.Declare(s)
	for _, key := range []string{"collector.process.top", "collector.probes.per-cgroup", "collector.probes.softirq-per-workload", "collector.cgroup.workloads"} {
		if s.Lookup(key) == nil {
			t.Errorf("%s not declared", key)
		}
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "outside collector.bad.*") {
			t.Errorf("a key outside collector.<name>.* was accepted: %v", r)
		}
	}()
	var v int
	withSettings(Registration{Name: "bad"}, func(s *setting.Set, _ *struct{}) {
		s.Int(&v, "power.bad", 0, "", 0, "")
	}).declare(&setting.Set{}, nil)
}
