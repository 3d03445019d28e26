// Package workloadtest holds fixture nodes of batch systems: the cgroup
// trees their plugins create, with the processes in them, so that the
// resolver's tests and the stats loop's conservation tests read the same
// layouts. Each tree follows the code that makes it, named on its
// constructor; none is a guess at a path.
package workloadtest

import (
	"os"
	"path"
	"path/filepath"
	"sort"
	"testing"
)

// Proc is a process of a fixture node: its status (Uid line), command
// line and environment, as /proc/PID shows them.
type Proc struct {
	UID     string
	Cmdline []string
	Env     []string
}

// Cgroup is one cgroup of a fixture node and the processes in it.
type Cgroup struct {
	Path string // relative to the hierarchy root
	PIDs []string
}

// Job is what a job's cgroups must resolve to: its label values at its
// level (in ident.LabelNames order) and how many of the node's cgroups
// are its.
type Job struct {
	Level   string
	Labels  []string
	Cgroups int
}

// Node is one fixture node.
type Node struct {
	Name    string
	Cgroups []Cgroup
	Procs   map[string]Proc
	Jobs    []Job
	// Passwd is the node's /etc/passwd.
	Passwd string
}

const passwd = "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/bash\nbob:x:2001:2001::/home/bob:/bin/bash\n"

// stepd is slurmstepd's process: root, its title set by
// _set_job_log_prefix (src/slurmd/slurmstepd/slurmstepd.c) through
// setproctitle, which writes "slurmstepd: " before it.
func stepd(jobStep string) Proc {
	return Proc{UID: "0", Cmdline: []string{"slurmstepd: [" + jobStep + "]"}}
}

// task is a task's process with the variables Slurm's env.c sets
// (SLURM_JOB_SLUID only in 26.05).
func task(uid, jobID, sluid string) Proc {
	env := []string{"HOME=/home/x", "SLURM_JOB_ID=" + jobID, "SLURM_JOBID=" + jobID}
	if sluid != "" {
		env = append(env, "SLURM_JOB_SLUID="+sluid)
	}
	return Proc{UID: uid, Cmdline: []string{"python3", "train.py"}, Env: env}
}

// slurmV2Job is one job in the cgroup/v2 plugin's tree
// (cgroup_p_step_create in src/plugins/cgroup/v2/cgroup_v2.c):
// <scope>/<job dir>/step_<s>/{slurm,user/task_<k>}, slurmstepd in
// slurm/, the tasks in user/task_<k>.
func slurmV2Job(scope, dir, jobID, sluid, uid string, steps []string, next *int, procs map[string]Proc) []Cgroup {
	var out []Cgroup
	pid := func() string { *next++; return itoa(*next) }
	for _, s := range steps {
		step := scope + "/" + dir + "/step_" + s
		sp := pid()
		procs[sp] = stepd(jobID + "." + s)
		tp := pid()
		procs[tp] = task(uid, jobID, sluid)
		out = append(out, Cgroup{Path: step + "/slurm", PIDs: []string{sp}}, Cgroup{Path: step + "/user/task_0", PIDs: []string{tp}})
	}
	return out
}

func itoa(n int) string {
	const digits = "0123456789"
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{digits[n%10]}, b...)
	}
	return string(b)
}

// Nodes are the fixture nodes:
//
//   - slurm-22.05-v1: the cgroup/v1 plugin's slurm/uid_<uid>/job_<id>/
//     step_<s>/task_<k> (as the real 22.05 e2e cluster shows it);
//   - slurm-22.05-v2: slurmstepd.scope/job_<id>/… (cgroup/v2 before 26.05);
//   - slurm-26.05-sluid: the 26.05 default, the job's directory named by
//     its SLUID (print_sluid, src/common/sluid.c), two slurmd on one host
//     (MULTIPLE_SLURMD: <node>_slurmstepd.scope, _set_int_cg_ns) in
//     CgroupSlice=slurm.slice;
//   - slurm-26.05-jobid: CgroupJobIdPaths=yes, job_<id> again;
//   - pbs-v1, pbs-v2: OpenPBS's cgroup hook (src/hooks/cgroups/
//     pbs_cgroups.PY), pbs_jobs.service/jobid/<job id> and
//     pbs_jobs.service/jobs/<job id>, an array subjob among them;
//
// each with batch, extern, interactive and numbered steps, and cgroups of
// no job (slurmd, the scope's system/ waiting area) beside them.
func Nodes() []Node {
	var nodes []Node
	{
		procs := map[string]Proc{"1": {UID: "0", Cmdline: []string{"/usr/sbin/slurmd"}}}
		n := Node{Name: "slurm-22.05-v1", Procs: procs, Passwd: passwd}
		n.Cgroups = []Cgroup{
			{Path: "/system.slice/slurmd.service", PIDs: []string{"1"}},
			{Path: "/slurm/uid_1000/job_4711/step_extern/task_0"},
			{Path: "/slurm/uid_1000/job_4711/step_batch/task_0"},
			{Path: "/slurm/uid_1000/job_4711/step_0/task_0"},
			{Path: "/slurm/uid_1000/job_4711/step_0/task_1"},
			{Path: "/slurm/uid_2001/job_4712/step_interactive/task_0"},
		}
		n.Jobs = []Job{{Level: "job", Labels: []string{"4711", "alice", "1000", "", ""}, Cgroups: 8},
			{Level: "job", Labels: []string{"4712", "bob", "2001", "", ""}, Cgroups: 3}}
		nodes = append(nodes, n)
	}
	{
		procs := map[string]Proc{"1": {UID: "0", Cmdline: []string{"/usr/sbin/slurmd"}}}
		next := 100
		n := Node{Name: "slurm-22.05-v2", Procs: procs, Passwd: passwd}
		n.Cgroups = append([]Cgroup{{Path: "/system.slice/slurmd.service", PIDs: []string{"1"}},
			{Path: "/system.slice/slurmstepd.scope/system"}},
			slurmV2Job("/system.slice/slurmstepd.scope", "job_77", "77", "", "2001", []string{"extern", "batch", "0"}, &next, procs)...)
		n.Jobs = []Job{{Level: "job", Labels: []string{"77", "bob", "2001", "", ""}, Cgroups: 13}}
		nodes = append(nodes, n)
	}
	{
		procs := map[string]Proc{"1": {UID: "0", Cmdline: []string{"/usr/sbin/slurmd"}}}
		next := 200
		n := Node{Name: "slurm-26.05-sluid", Procs: procs, Passwd: passwd}
		n.Cgroups = []Cgroup{{Path: "/slurm.slice/slurmd.service", PIDs: []string{"1"}},
			{Path: "/slurm.slice/n1_slurmstepd.scope/system"}, {Path: "/slurm.slice/n2_slurmstepd.scope/system"}}
		n.Cgroups = append(n.Cgroups, slurmV2Job("/slurm.slice/n1_slurmstepd.scope", "sEKNKTV3WPV500", "123", "sEKNKTV3WPV500", "1000",
			[]string{"extern", "batch", "0", "1"}, &next, procs)...)
		n.Cgroups = append(n.Cgroups, slurmV2Job("/slurm.slice/n2_slurmstepd.scope", "s0G2ZRWXM8Q001", "124", "s0G2ZRWXM8Q001", "2001",
			[]string{"interactive"}, &next, procs)...)
		// A job whose step daemon and tasks are gone from procfs (or
		// hidden): its numeric id is unknown, and it is still a job,
		// labelled by its SLUID.
		n.Cgroups = append(n.Cgroups, Cgroup{Path: "/slurm.slice/n2_slurmstepd.scope/sEKNKTV3WPV5Z9/step_0/user/task_0"})
		n.Jobs = []Job{
			{Level: "job", Labels: []string{"123", "alice", "1000", "n1", "sEKNKTV3WPV500"}, Cgroups: 17},
			{Level: "job", Labels: []string{"124", "bob", "2001", "n2", "s0G2ZRWXM8Q001"}, Cgroups: 5},
			{Level: "job", Labels: []string{"", "", "", "n2", "sEKNKTV3WPV5Z9"}, Cgroups: 4},
		}
		nodes = append(nodes, n)
	}
	{
		procs := map[string]Proc{"1": {UID: "0", Cmdline: []string{"/usr/sbin/slurmd"}}}
		next := 300
		n := Node{Name: "slurm-26.05-jobid", Procs: procs, Passwd: passwd}
		n.Cgroups = append([]Cgroup{{Path: "/system.slice/slurmd.service", PIDs: []string{"1"}}},
			slurmV2Job("/system.slice/slurmstepd.scope", "job_125", "125", "sEKNKTV3WPV600", "1000",
				[]string{"extern", "batch", "0", "interactive"}, &next, procs)...)
		n.Jobs = []Job{{Level: "job", Labels: []string{"125", "alice", "1000", "", "sEKNKTV3WPV600"}, Cgroups: 17}}
		nodes = append(nodes, n)
	}
	{
		// PBS on cgroup v1: the hook's _assemble_path puts jobs in
		// <mount>/<prefix>.service/jobid/<job id>; the job's processes
		// run as its owner, the MoM outside in pbs.service.
		procs := map[string]Proc{"1": {UID: "0", Cmdline: []string{"/opt/pbs/sbin/pbs_mom"}},
			"11": {UID: "1000", Cmdline: []string{"/bin/bash", "/var/spool/pbs/mom_priv/jobs/12345.pbs01.SC"}},
			"12": {UID: "1000", Cmdline: []string{"./a.out"}},
			"21": {UID: "0", Cmdline: []string{"/var/spool/pbs/mom_priv/prologue"}},
			"22": {UID: "2001", Cmdline: []string{"./sim"}}}
		n := Node{Name: "pbs-v1", Procs: procs, Passwd: passwd}
		n.Cgroups = []Cgroup{{Path: "/system.slice/pbs.service", PIDs: []string{"1"}},
			{Path: "/pbs_jobs.service"},
			{Path: "/pbs_jobs.service/jobid"},
			{Path: "/pbs_jobs.service/jobid/12345.pbs01", PIDs: []string{"11", "12"}},
			{Path: "/pbs_jobs.service/jobid/12346[3].pbs01.example.org", PIDs: []string{"21", "22"}}}
		n.Jobs = []Job{{Level: "pbs_job", Labels: []string{"12345.pbs01", "alice", "1000"}, Cgroups: 1},
			{Level: "pbs_job", Labels: []string{"12346[3].pbs01.example.org", "bob", "2001"}, Cgroups: 1}}
		nodes = append(nodes, n)
	}
	{
		// PBS on cgroup v2: <prefix>.service/jobs/<job id>, with a
		// cgroup the job made below its own.
		procs := map[string]Proc{"1": {UID: "0", Cmdline: []string{"/opt/pbs/sbin/pbs_mom"}},
			"31": {UID: "2001", Cmdline: []string{"mpirun", "./sim"}}, "32": {UID: "2001", Cmdline: []string{"./sim"}}}
		n := Node{Name: "pbs-v2", Procs: procs, Passwd: passwd}
		n.Cgroups = []Cgroup{{Path: "/system.slice/pbs.service", PIDs: []string{"1"}},
			{Path: "/pbs_jobs.service/jobs/4711.srv"},
			{Path: "/pbs_jobs.service/jobs/4711.srv/rank0", PIDs: []string{"31"}},
			{Path: "/pbs_jobs.service/jobs/4711.srv/rank1", PIDs: []string{"32"}}}
		n.Jobs = []Job{{Level: "pbs_job", Labels: []string{"4711.srv", "bob", "2001"}, Cgroups: 3}}
		nodes = append(nodes, n)
	}
	for i := range nodes {
		nodes[i].Cgroups = withAncestors(nodes[i].Cgroups)
	}
	return nodes
}

// withAncestors adds every cgroup's ancestors below the root, as the
// hierarchy has them (a job's and a step's own directory, the scope), with
// no process of their own: on cgroup v2 only leaves hold processes.
func withAncestors(cgs []Cgroup) []Cgroup {
	have := map[string]bool{}
	for _, c := range cgs {
		have[c.Path] = true
	}
	out := cgs
	for _, c := range cgs {
		for p := path.Dir(c.Path); p != "/" && p != "."; p = path.Dir(p) {
			if !have[p] {
				have[p] = true
				out = append(out, Cgroup{Path: p})
			}
		}
	}
	return out
}

// Write lays node out under dir: cgroup/<path>/cgroup.procs, proc/<pid>/
// {status,cmdline,environ} and etc/passwd. It returns the three roots.
func Write(t testing.TB, dir string, n Node) (cgroupRoot, procRoot, etcRoot string) {
	t.Helper()
	cgroupRoot, procRoot, etcRoot = filepath.Join(dir, "cgroup"), filepath.Join(dir, "proc"), filepath.Join(dir, "etc")
	write := func(p, data string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range n.Cgroups {
		procs := ""
		for _, p := range c.PIDs {
			procs += p + "\n"
		}
		write(filepath.Join(cgroupRoot, c.Path, "cgroup.procs"), procs)
	}
	pids := make([]string, 0, len(n.Procs))
	for pid := range n.Procs {
		pids = append(pids, pid)
	}
	sort.Strings(pids)
	for _, pid := range pids {
		p := n.Procs[pid]
		write(filepath.Join(procRoot, pid, "status"), "Name:\tx\nPid:\t"+pid+"\nUid:\t"+p.UID+"\t"+p.UID+"\t"+p.UID+"\t"+p.UID+"\n")
		write(filepath.Join(procRoot, pid, "cmdline"), join0(p.Cmdline))
		write(filepath.Join(procRoot, pid, "environ"), join0(p.Env))
	}
	write(filepath.Join(etcRoot, "passwd"), n.Passwd)
	return cgroupRoot, procRoot, etcRoot
}

func join0(ss []string) string {
	out := ""
	for _, s := range ss {
		out += s + "\x00"
	}
	return out
}
