package alloc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/wattrace/wattrace/internal/procpid"
	"github.com/wattrace/wattrace/pkg/reading"
)

// OrderMap maps Slurm's GPU indices to devices, as CEEMS's
// --collector.slurm.gpu-order-map does: Slurm may order full GPUs and MIG
// instances differently from nvidia-smi. "0:1,1:0.3,2:0.4" says Slurm GPU
// 0 is device 1 and Slurm GPU 1 is instance GI 3 of device 0.
type OrderMap map[int]string

var orderEntry = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

// ParseOrderMap parses "<slurm index>:<device index>[.<gi>]" entries
// separated by commas; "" is the identity map (nil).
func ParseOrderMap(s string) (OrderMap, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	m := OrderMap{}
	for _, e := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(e), ":")
		n, err := strconv.Atoi(k)
		if !ok || err != nil || n < 0 || !orderEntry.MatchString(v) {
			return nil, fmt.Errorf("entry %q is not <slurm index>:<gpu index>[.<gi>]", e)
		}
		if _, dup := m[n]; dup {
			return nil, fmt.Errorf("slurm index %d mapped twice", n)
		}
		m[n] = v
	}
	return m, nil
}

// Slurm finds Slurm jobs' GPUs in their processes' environment:
// SLURM_STEP_GPUS, else SLURM_JOB_GPUS (Slurm indices, mapped through the
// order map), else CUDA_VISIBLE_DEVICES when it holds UUIDs (its indices
// are relative to the job's cgroup, so they name no host device). Reading
// another user's environ needs root (CAP_SYS_PTRACE), as for CEEMS.
type Slurm struct {
	ProcRoot string
	Order    OrderMap
	// cache: process → allocations, because a process's initial
	// environment never changes; processes that vanish are dropped at
	// each scan. A process is its PID and its start time: a PID reused
	// between two scans (a new job's process) is another process.
	cache map[procID][]Allocation
	// denied counts, in the latest scan, processes whose environ could
	// not be read for lack of permission.
	denied int
}

// Denied is how many processes' environment the latest scan could not
// read for lack of permission (another user's, without CAP_SYS_PTRACE):
// their jobs' GPUs are missing from it.
func (s *Slurm) Denied() int { return s.denied }

func (s *Slurm) Name() string { return "slurm" }

// procID is a process: its PID and start time (clock ticks since boot,
// /proc/PID/stat's 22nd field; 0 when unreadable).
type procID struct {
	pid   int
	start uint64
}

// startTime reads a process's start time from /proc/PID/stat.
func startTime(root string, pid int) uint64 {
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid …: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

// Allocations scans /proc/*/environ. One process per job is enough; every
// job is reported once per device.
func (s *Slurm) Allocations(context.Context) ([]Allocation, error) {
	root := s.ProcRoot
	if root == "" {
		root = "/proc"
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("slurm gpu allocations: %w", err)
	}
	if s.cache == nil {
		s.cache = map[procID][]Allocation{}
	}
	live := make(map[procID]bool, len(ents))
	s.denied = 0
	type jd struct{ job, dev string }
	seen := map[jd]bool{}
	var out []Allocation
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		id := procID{pid, startTime(root, pid)}
		live[id] = true
		as, ok := s.cache[id]
		if !ok {
			b, err := procpid.ReadEnviron(root, pid)
			if errors.Is(err, fs.ErrPermission) {
				s.denied++
				continue
			}
			if err != nil {
				continue // gone, or a kernel thread; try again next time
			}
			as = s.parse(b)
			s.cache[id] = as
		}
		for _, a := range as {
			k := jd{a.Holder.JobID, a.Device.Index + a.Device.UUID}
			if !seen[k] {
				seen[k] = true
				out = append(out, a)
			}
		}
	}
	for id := range s.cache {
		if !live[id] {
			delete(s.cache, id)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Holder.JobID != out[j].Holder.JobID {
			return out[i].Holder.JobID < out[j].Holder.JobID
		}
		return out[i].Device.Index+out[i].Device.UUID < out[j].Device.Index+out[j].Device.UUID
	})
	return out, nil
}

func (s *Slurm) parse(environ []byte) []Allocation {
	env := procpid.ParseEnviron(environ)
	job, step, jobGPUs, cuda := env["SLURM_JOB_ID"], env["SLURM_STEP_GPUS"], env["SLURM_JOB_GPUS"], env["CUDA_VISIBLE_DEVICES"]
	if job == "" {
		return nil
	}
	h := reading.Holder{Kind: reading.HolderSlurmJob, JobID: job}
	var out []Allocation
	list := step
	if list == "" {
		list = jobGPUs
	}
	if list != "" {
		for _, f := range strings.Split(list, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 0 {
				continue
			}
			idx := strconv.Itoa(n)
			if v, ok := s.Order[n]; ok {
				idx = v
			}
			out = append(out, Allocation{Device: Ref{Index: idx}, Holder: h})
		}
		return out
	}
	for _, f := range strings.Split(cuda, ",") {
		f = strings.TrimSpace(f)
		if strings.HasPrefix(f, "GPU-") || strings.HasPrefix(f, "MIG-") {
			out = append(out, Allocation{Device: Ref{UUID: f}, Holder: h})
		}
	}
	return out
}
