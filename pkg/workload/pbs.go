package workload

import (
	"os"
	"path"
	"path/filepath"
)

// maxPBSDirs bounds the cgroups of one PBS job asked for its owner: the
// job's own and those a level below it (a user's own sub-cgroups).
const maxPBSDirs = 64

// pbsUID finds the owner of a PBS job from the processes in its cgroup
// (base) or a cgroup just below it, and remembers it per job. The cgroup
// hook puts the job's session there, which runs as the job's owner; a
// root process (a prologue, the MoM attaching a task) names nobody, so
// the first process of another uid is the owner.
func (r *Resolver) pbsUID(base string) (string, bool) {
	r.jobMu.Lock()
	uid, ok := r.jobUIDs[base]
	r.jobMu.Unlock()
	if ok {
		return uid, true
	}
	if r.cgroupRoot == "" {
		return "", false
	}
	dirs := []string{base}
	ents, _ := os.ReadDir(filepath.Join(r.cgroupRoot, base))
	for _, e := range ents {
		if e.IsDir() && len(dirs) < maxPBSDirs {
			dirs = append(dirs, path.Join(base, e.Name()))
		}
	}
	for _, d := range dirs {
		for _, pid := range r.pids(d) {
			if uid, ok := r.procUID(pid); ok && uid != "0" {
				r.jobMu.Lock()
				r.jobUIDs[base] = uid
				r.jobMu.Unlock()
				return uid, true
			}
		}
	}
	return "", false
}
