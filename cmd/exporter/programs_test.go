package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"go.uber.org/zap/zaptest"

	"github.com/wattrace/wattrace/internal/collector"
	"github.com/wattrace/wattrace/internal/testenv"
)

// Every BPF program the exporter holds, the accounting's (its task
// iterator included), the cgroup names' and every probe's (the
// context-switch counters and the probes' iterator included), has its cost
// in wattrace_bpf_program_runs_total: the wiring run uses, with real BPF.
// The programs it must cover are the ones the kernel says this process
// holds (fdinfo prog_id of its program and link descriptors), not a list
// kept beside the code, so a program added without its cost fails here.
func TestEveryProgramHasItsCost(t *testing.T) {
	testenv.RequireRoot(t)
	before := heldPrograms(t, os.Getpid())
	cfg, err := Load([]string{"--collector.bpf-stats", "--collector.probes.counters=cpu_clock",
		"--accounting.mode=bpf", "--web.alloy-targets=false", "--collector.container=false", "--collector.pod=false",
		"--collector.vm=false", "--collector.job=false", "--collector.unit=false"})
	if err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t)
	c := newComponents(log)
	defer c.close()
	// The wiring run uses, less the web server.
	st := &state{}
	if err := openParts(cfg, st, c, partsExcept("web listeners", "HTTP")); err != nil {
		t.Fatal(err)
	}
	if !st.acc.bpfMode() {
		t.Fatal("accounting.mode=bpf did not run BPF accounting")
	}
	programs, reg := st.programs, st.reg.all()
	if !st.collectorOn[collector.NameProbes] || len(programs) != 3 {
		t.Fatalf("probes on = %v with %d program sources, want the probes and 3 sources (accounting, cgroup names, probes)", st.collectorOn[collector.NameProbes], len(programs))
	}

	var want []string
	for _, src := range programs {
		ps, err := src.ProgramStats()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range ps {
			want = append(want, s.Name)
		}
	}
	sort.Strings(want)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		if mf.GetName() != "wattrace_bpf_program_runs_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got = append(got, m.GetLabel()[0].GetValue())
		}
	}
	sort.Strings(got)
	t.Logf("programs: %v", got)
	if len(got) != len(want) || len(got) < 10 {
		t.Fatalf("cost of %d programs %v, want all %d loaded: %v", len(got), got, len(want), want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("program %d: %s, want %s", i, got[i], want[i])
		}
	}
	// The kernel keeps the first 15 bytes of a program's name.
	var held []string
	for id := range heldPrograms(t, os.Getpid()) {
		if before[id] {
			continue
		}
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			t.Fatalf("program %d: %v", id, err)
		}
		info, err := p.Info()
		p.Close()
		if err != nil {
			t.Fatalf("program %d: %v", id, err)
		}
		held = append(held, info.Name)
	}
	sort.Strings(held)
	var exported []string
	for _, name := range got {
		exported = append(exported, name[:min(len(name), 15)])
	}
	sort.Strings(exported)
	if strings.Join(held, " ") != strings.Join(exported, " ") {
		t.Errorf("the process holds %d programs %v, the cost family has %d %v", len(held), held, len(exported), exported)
	}
	for _, name := range []string{"dump_task", "fold_tasks", "task_exit", "task_free", "task_fork", "task_move", "cgroup_mkdir", "counters_switch", "softirq_in", "net_send"} {
		if i := sort.SearchStrings(got, name); i == len(got) || got[i] != name {
			t.Errorf("%s missing from the program-cost family", name)
		}
	}
}

// A step of the loop walks the node's tasks once, as the exporter's
// program-cost family shows: the runs of the task-iterator programs (the
// accounting's and the probes' fold, found from the iterator links the
// kernel says this process holds, not by name) per step are one per task.
// Before, the accounting's iterator and the probes' fold each walked every
// task: two runs per task and step.
func TestOneTaskWalkPerStep(t *testing.T) {
	testenv.RequireRoot(t)
	cfg, err := Load([]string{"--collector.bpf-stats", "--accounting.mode=bpf", "--web.alloy-targets=false"})
	if err != nil {
		t.Fatal(err)
	}
	c := newComponents(zaptest.NewLogger(t))
	defer c.close()
	st := &state{}
	if err := openParts(cfg, st, c, partsExcept("web listeners", "HTTP")); err != nil {
		t.Fatal(err)
	}
	if !st.acc.bpfMode() || !st.collectorOn[collector.NameProbes] {
		t.Fatalf("BPF mode %v, probes %v: want both", st.acc.bpfMode(), st.collectorOn[collector.NameProbes])
	}
	iters := iterPrograms(t, os.Getpid())
	if len(iters) < 2 {
		t.Fatalf("task iterators held: %v, want the accounting's and the probes' fold", iters)
	}
	runs := func() float64 {
		t.Helper()
		mfs, err := st.reg.all().Gather()
		if err != nil {
			t.Fatal(err)
		}
		var n float64
		for _, mf := range mfs {
			if mf.GetName() != "wattrace_bpf_program_runs_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				if name := m.GetLabel()[0].GetValue(); iters[name[:min(len(name), 15)]] {
					n += m.GetCounter().GetValue()
				}
			}
		}
		return n
	}
	st.loop.Step(time.Now()) // the baseline
	const steps = 5
	before, tasks := runs(), 0
	for i := range steps {
		tasks += testenv.LiveTasks(t)
		st.loop.Step(time.Now().Add(time.Duration(i+1) * time.Second))
		tasks += testenv.LiveTasks(t)
	}
	perStep := float64(tasks) / 2 / steps
	walks := (runs() - before) / steps / perStep
	t.Logf("iterators %v; %d steps over ~%.0f tasks: %.2f walks per step", iters, steps, perStep, walks)
	// Other processes come and go between the counts; each walk also
	// runs its program once more at its end, with no task.
	if walks < 0.8 || walks > 1.3 {
		t.Errorf("%.2f walks of the tasks per step, want 1", walks)
	}
}

// iterPrograms names the programs that process pid has attached as task
// iterators (an iter link's prog_id in its fdinfo), as the kernel keeps
// them (15 bytes).
func iterPrograms(t *testing.T, pid int) map[string]bool {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil || !strings.Contains(string(data), "link_type:\titer") {
			continue
		}
		for _, line := range strings.Split(string(data), "\n") {
			v, ok := strings.CutPrefix(line, "prog_id:")
			if !ok {
				continue
			}
			id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			if err != nil {
				t.Fatal(err)
			}
			p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
			if err != nil {
				t.Fatal(err)
			}
			info, err := p.Info()
			p.Close()
			if err != nil {
				t.Fatal(err)
			}
			out[info.Name] = true
		}
	}
	return out
}

// partsExcept is parts without the named ones.
func partsExcept(names ...string) []part {
	var out []part
	for _, p := range parts {
		if !slices.Contains(names, p.name) {
			out = append(out, p)
		}
	}
	return out
}
