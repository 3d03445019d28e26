package workload

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/wattrace/wattrace/internal/procpid"
)

// reStepdTitle is the process title slurmstepd gives itself
// (_set_job_log_prefix in src/slurmd/slurmstepd/slurmstepd.c: "[" and
// log_build_step_id_str's <job id>.<step>, after setproctitle's
// "slurmstepd: "), read from /proc/PID/cmdline. A stepmgr step adds
// " stepmgr". Without a numeric job id 26.05 prints the SLUID there,
// which names nothing new.
var reStepdTitle = regexp.MustCompile(`^slurmstepd: \[([0-9]{1,10})\.(?:[0-9]+|batch|extern|interactive)(?: stepmgr)?\]`)

// reSLUID is a SLUID as print_sluid writes it.
var reSLUID = regexp.MustCompile(`^s[0-9A-F][0-9A-HJKMNP-TV-Z]{12}$`)

// taskSLUID reads the SLUID of job jobID from the environment of a task
// (Slurm 26.05 sets SLURM_JOB_SLUID), for a job whose cgroup is named by
// its numeric id (CgroupJobIdPaths=yes): "" when the task is not of that
// job or carries none (before 26.05). The owner's own task could write
// another value; nothing but the label reads it (the units server keys a
// series with a job_id by the job_id).
func (r *Resolver) taskSLUID(pid int, jobID string) string {
	if jobID == "" {
		return ""
	}
	env, err := procpid.ReadEnviron(r.procRoot, pid)
	if err != nil {
		return ""
	}
	if jid, ok := procpid.LookupEnviron(env, "SLURM_JOB_ID"); !ok || jid != jobID {
		return ""
	}
	s, _ := procpid.LookupEnviron(env, "SLURM_JOB_SLUID")
	if !reSLUID.MatchString(s) {
		return ""
	}
	return s
}

// jobSLUID is the SLUID found with the owner of the job at base.
func (r *Resolver) jobSLUID(base string) string {
	r.jobMu.Lock()
	defer r.jobMu.Unlock()
	return r.jobSLUIDs[base]
}

// validJobID reports whether s is a Slurm job id: a 32-bit number other
// than 0 (Slurm's NO_VAL and above are not job ids either).
func validJobID(s string) bool {
	if s == "" || len(s) > 10 || s[0] == '0' {
		return false
	}
	n, err := strconv.ParseUint(s, 10, 32)
	return err == nil && n > 0 && n < 0xfffffffe
}

// jobID finds the numeric id of the Slurm 26.05 job whose cgroup (base)
// is named by its SLUID, and remembers it per job.
//
// The step daemon is asked first: slurmstepd runs as root in each step's
// slurm/ cgroup and names its step in its process title, which no job's
// user can write. Failing that (a host whose procfs hides root's command
// lines), a task's environment: Slurm sets SLURM_JOB_ID and
// SLURM_JOB_SLUID for every task (src/common/env.c). A task can rewrite
// its own environment, so it is believed only when SLURM_JOB_SLUID names
// this very directory, and a task that names another job's id gains
// nothing its own processes did not have: the energy stays this
// directory's.
func (r *Resolver) jobID(sluid, base string) (string, bool) {
	r.jobMu.Lock()
	jid, ok := r.jobIDs[base]
	r.jobMu.Unlock()
	if ok {
		return jid, true
	}
	if r.cgroupRoot == "" {
		return "", false
	}
	steps, _ := os.ReadDir(filepath.Join(r.cgroupRoot, base))
	var tasks []string
	found := ""
	for _, s := range steps {
		if !s.IsDir() || !strings.HasPrefix(s.Name(), "step_") {
			continue
		}
		step := path.Join(base, s.Name())
		if found == "" {
			found = r.stepdJobID(path.Join(step, "slurm"))
		}
		for _, under := range []string{path.Join(step, "user"), step} {
			ents, _ := os.ReadDir(filepath.Join(r.cgroupRoot, under))
			for _, t := range ents {
				if t.IsDir() && strings.HasPrefix(t.Name(), "task_") {
					tasks = append(tasks, path.Join(under, t.Name()))
				}
			}
		}
	}
	if found == "" {
		found = r.taskJobID(sluid, tasks)
	}
	if found == "" {
		return "", false
	}
	r.jobMu.Lock()
	r.jobIDs[base] = found
	r.jobMu.Unlock()
	return found, true
}

// stepdJobID reads the job id from the title of a root process in a
// step's slurm/ cgroup.
func (r *Resolver) stepdJobID(cg string) string {
	for _, pid := range r.pids(cg) {
		if uid, ok := r.procUID(pid); !ok || uid != "0" {
			continue
		}
		cmd, err := r.procFile(pid, "cmdline")
		if err != nil {
			continue
		}
		// setproctitle pads the argument area with NULs.
		title, _, _ := strings.Cut(string(cmd), "\x00")
		if m := reStepdTitle.FindStringSubmatch(title); m != nil && validJobID(m[1]) {
			return m[1]
		}
	}
	return ""
}

// taskJobID reads SLURM_JOB_ID from the environment of a task that
// carries this job's SLURM_JOB_SLUID. Tasks that disagree on the id make
// the answer unknown rather than the first one's.
func (r *Resolver) taskJobID(sluid string, tasks []string) string {
	found := ""
	for _, t := range tasks {
		for _, pid := range r.pids(t) {
			env, err := procpid.ReadEnviron(r.procRoot, pid)
			if err != nil {
				continue
			}
			if s, ok := procpid.LookupEnviron(env, "SLURM_JOB_SLUID"); !ok || s != sluid {
				continue
			}
			jid, ok := procpid.LookupEnviron(env, "SLURM_JOB_ID")
			if !ok || !validJobID(jid) {
				continue
			}
			if found != "" && found != jid {
				return ""
			}
			found = jid
		}
	}
	return found
}
