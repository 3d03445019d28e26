package workload

import (
	"strings"
	"testing"

	"github.com/wattrace/wattrace/internal/workload/workloadtest"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// Every fixture node's cgroups resolve to its jobs, with the labels the
// job level exports, whatever the layout (22.05 v1 and v2, 26.05 by SLUID
// and with CgroupJobIdPaths=yes).
func TestResolveFixtureNodes(t *testing.T) {
	for _, n := range workloadtest.Nodes() {
		t.Run(n.Name, func(t *testing.T) {
			cg, proc, etc := workloadtest.Write(t, t.TempDir(), n)
			r := NewResolver(Options{ProcRoot: proc, EtcRoot: etc, CgroupRoot: cg, LibvirtDirs: []string{}})
			got := map[string]int{}
			for _, c := range n.Cgroups {
				id := r.Resolve(c.Path)
				for _, level := range ident.Levels() {
					if vals, ok := id.LabelValues(level); ok && level != ident.KindSystemdUnit {
						got[string(level)+" "+strings.Join(vals, ",")]++
					}
				}
			}
			want := map[string]int{}
			for _, j := range n.Jobs {
				want[j.Level+" "+strings.Join(j.Labels, ",")] = j.Cgroups
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s: %d cgroups, want %d (all: %v)", k, got[k], v, got)
				}
			}
			if len(got) != len(want) {
				t.Errorf("workloads %v, want %v", got, want)
			}
		})
	}
}

func TestParseSLUID(t *testing.T) { runParse(t, sluidCases()) }

// sluidCases are TestParseSLUID's cases, also read by TestParseGolden.
func sluidCases() []parseCase {
	const s = "sEKNKTV3WPV500"
	job := func(node, step, task, part string) ident.Identity {
		return ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm, ID: s, SLUID: s, SlurmNode: node, Step: step, Task: task, Part: part}
	}
	return []parseCase{
		{"26.05 task", "/system.slice/slurmstepd.scope/" + s + "/step_0/user/task_0", job("", "0", "0", "")},
		{"26.05 stepd", "/system.slice/slurmstepd.scope/" + s + "/step_batch/slurm", job("", "batch", "", "stepd")},
		{"26.05 extern", "/system.slice/slurmstepd.scope/" + s + "/step_extern/user/task_special", job("", "extern", "special", "")},
		{"26.05 interactive", "/system.slice/slurmstepd.scope/" + s + "/step_interactive/user", job("", "interactive", "", "")},
		{"26.05 job", "/system.slice/slurmstepd.scope/" + s, job("", "", "", "")},
		{"26.05 multiple slurmd in CgroupSlice", "/slurm.slice/n7_slurmstepd.scope/" + s + "/step_3/user/task_1", job("n7", "3", "1", "")},
		{"26.05 CgroupJobIdPaths=yes", "/system.slice/slurmstepd.scope/job_125/step_0/user/task_0",
			ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm, ID: "125", JobID: "125", Step: "0", Task: "0"}},
		// Not SLUIDs: lower case, Crockford's excluded letters, a first
		// digit above F (more than 64 bits), the wrong length.
		{"lower case", "/system.slice/slurmstepd.scope/seknktv3wpv500", stepdPart("seknktv3wpv500")},
		{"letter U", "/system.slice/slurmstepd.scope/sEKNKTV3WPU500", stepdPart("sEKNKTV3WPU500")},
		{"65 bits", "/system.slice/slurmstepd.scope/sGKNKTV3WPV500", stepdPart("sGKNKTV3WPV500")},
		{"short", "/system.slice/slurmstepd.scope/sEKNKTV3WPV50", stepdPart("sEKNKTV3WPV50")},
		{"outside the scope", "/system.slice/" + s,
			ident.Identity{Kind: ident.KindSystemdUnit, Manager: ident.ManagerSystemd, ID: "system.slice", Name: "system.slice", Part: s}},
	}
}

func stepdPart(part string) ident.Identity {
	return ident.Identity{Kind: ident.KindSystemdUnit, Manager: ident.ManagerSystemd, ID: "slurmstepd.scope", Name: "slurmstepd.scope", Part: part}
}

// The numeric id of a SLUID job: from slurmstepd's title, else from a task
// whose SLURM_JOB_SLUID names the directory; tasks that claim another
// SLUID are not believed.
func TestResolveSLUIDJobID(t *testing.T) {
	h := newHost(t, "systemd")
	scope := "/system.slice/slurmstepd.scope/"
	h.cgroup(scope+"sEKNKTV3WPV500/step_0/slurm", "10\n")
	h.cgroup(scope+"sEKNKTV3WPV500/step_0/user/task_0", "11\n")
	h.process("10", "status", "Uid:\t0\t0\t0\t0\n")
	h.process("10", "cmdline", "slurmstepd: [123.0]\x00\x00\x00")
	h.process("11", "status", "Uid:\t1000\t1000\t1000\t1000\n")
	h.process("11", "environ", "SLURM_JOB_ID=999\x00SLURM_JOB_SLUID=sEKNKTV3WPV500\x00")
	// No readable step daemon: the task's environment.
	h.cgroup(scope+"sEKNKTV3WPV501/step_batch/user/task_0", "21\n")
	h.process("21", "status", "Uid:\t2001\t2001\t2001\t2001\n")
	h.process("21", "environ", "SLURM_JOB_SLUID=sEKNKTV3WPV501\x00SLURM_JOB_ID=124\x00")
	// A user's process posing as slurmstepd, and a task naming another
	// job's SLUID: neither is believed.
	h.cgroup(scope+"sEKNKTV3WPV502/step_0/slurm", "30\n")
	h.cgroup(scope+"sEKNKTV3WPV502/step_0/user/task_0", "31\n")
	h.process("30", "status", "Uid:\t2001\t2001\t2001\t2001\n")
	h.process("30", "cmdline", "slurmstepd: [1.0]\x00")
	h.process("31", "status", "Uid:\t2001\t2001\t2001\t2001\n")
	h.process("31", "environ", "SLURM_JOB_SLUID=sEKNKTV3WPV500\x00SLURM_JOB_ID=123\x00")
	r := h.resolver(nil)

	checkResolve(t, r, scope+"sEKNKTV3WPV500/step_0/user/task_0", ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm,
		ID: "123", JobID: "123", SLUID: "sEKNKTV3WPV500", UID: "1000", User: "alice", Step: "0", Task: "0"})
	checkResolve(t, r, scope+"sEKNKTV3WPV501/step_batch/user/task_0", ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm,
		ID: "124", JobID: "124", SLUID: "sEKNKTV3WPV501", UID: "2001", User: "bob", Step: "batch", Task: "0"})
	checkResolve(t, r, scope+"sEKNKTV3WPV502/step_0/user/task_0", ident.Identity{Kind: ident.KindJob, Manager: ident.ManagerSlurm,
		ID: "sEKNKTV3WPV502", SLUID: "sEKNKTV3WPV502", UID: "2001", User: "bob", Step: "0", Task: "0"})
	vals, ok := r.Resolve(scope + "sEKNKTV3WPV502/step_0/slurm").LabelValues(ident.KindJob)
	if !ok || strings.Join(vals, ",") != ",bob,2001,,sEKNKTV3WPV502" {
		t.Errorf("unresolved SLUID job's labels %q (%v), want it a job of its own", vals, ok)
	}
}

func TestValidJobID(t *testing.T) {
	for s, want := range map[string]bool{"1": true, "4294967293": true, "0": false, "007": false, "4294967294": false,
		"99999999999": false, "": false, "12a": false, "-1": false} {
		if got := validJobID(s); got != want {
			t.Errorf("validJobID(%q) = %v, want %v", s, got, want)
		}
	}
}
