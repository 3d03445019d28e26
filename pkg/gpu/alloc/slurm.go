package alloc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/wattrace/wattrace/internal/procpid"
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
	// cache: pid → allocations, because a process's initial environment
	// never changes; pids that vanish are dropped at each scan.
	cache map[int][]Allocation
	// denied counts, in the latest scan, processes whose environ could
	// not be read for lack of permission.
	denied int
}

// Denied is how many processes' environment the latest scan could not
// read for lack of permission (another user's, without CAP_SYS_PTRACE):
// their jobs' GPUs are missing from it.
func (s *Slurm) Denied() int { return s.denied }

func (s *Slurm) Name() string { return "slurm" }

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
		s.cache = map[int][]Allocation{}
	}
	live := make(map[int]bool, len(ents))
	s.denied = 0
	type jd struct{ job, dev string }
	seen := map[jd]bool{}
	var out []Allocation
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		live[pid] = true
		as, ok := s.cache[pid]
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
			s.cache[pid] = as
		}
		for _, a := range as {
			k := jd{a.Holder.JobID, a.Device.Index + a.Device.UUID}
			if !seen[k] {
				seen[k] = true
				out = append(out, a)
			}
		}
	}
	for pid := range s.cache {
		if !live[pid] {
			delete(s.cache, pid)
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
	h := Holder{Kind: SlurmJob, JobID: job}
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
