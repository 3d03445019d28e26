package collector

import (
	"os"
	"strings"
	"testing"
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
