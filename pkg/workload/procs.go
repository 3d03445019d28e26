package workload

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// maxPIDs bounds how many processes of one cgroup enrichment looks at.
const maxPIDs = 8

// fileStamp identifies a version of a file without reading it.
type fileStamp struct {
	ino  uint64
	size int64
	mod  time.Time
}

func stampOf(path string) (fileStamp, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, false
	}
	st := fileStamp{size: fi.Size(), mod: fi.ModTime()}
	if s, ok := fi.Sys().(*syscall.Stat_t); ok {
		st.ino = s.Ino
	}
	return st, true
}

// pids returns up to maxPIDs processes of the cgroup at rel: cgroup.procs,
// or, for a threaded cgroup (a libvirt vcpu on cgroup v2), cgroup.threads,
// whose thread ids /proc also answers for. Nil when the cgroup root is not
// configured or the cgroup is gone.
func (r *Resolver) pids(rel string) []int {
	if r.cgroupRoot == "" {
		return nil
	}
	dir := filepath.Join(r.cgroupRoot, rel)
	for _, f := range []string{"cgroup.procs", "cgroup.threads"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			continue
		}
		var out []int
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() && len(out) < maxPIDs {
			if n, err := strconv.Atoi(sc.Text()); err == nil && n > 0 {
				out = append(out, n)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	return nil
}

func (r *Resolver) procFile(pid int, name string) ([]byte, error) {
	return os.ReadFile(filepath.Join(r.procRoot, strconv.Itoa(pid), name))
}

// procUID returns the real uid of a process from its status file.
func (r *Resolver) procUID(pid int) (string, bool) {
	data, err := r.procFile(pid, "status")
	if err != nil {
		return "", false
	}
	for line := range bytes.SplitSeq(data, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("Uid:")); ok {
			f := bytes.Fields(rest)
			if len(f) > 0 {
				return string(f[0]), true
			}
		}
	}
	return "", false
}
