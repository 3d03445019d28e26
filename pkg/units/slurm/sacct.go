package slurm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/wattrace/wattrace/pkg/units"
)

// SacctFields are the columns asked of sacct, in the order parsed. JobName
// is the only free text; a '|' inside it is told apart by the field count.
var SacctFields = []string{"JobIDRaw", "JobName", "User", "Group", "Account", "Partition", "NodeList",
	"State", "Submit", "Start", "End", "AllocCPUS", "AllocTRES", "ExitCode", "ElapsedRaw", "TotalCPU", "Cluster"}

// Sacct reads jobs with the sacct command.
type Sacct struct {
	// Path is the sacct command ("sacct" from PATH by default).
	Path string
	// Cluster is the units' cluster name.
	Cluster string
	// Timeout bounds one run (2 min by default).
	Timeout time.Duration
}

var _ Source = (*Sacct)(nil)

// Name is "sacct".
func (s *Sacct) Name() string { return "sacct" }

// Args are sacct's arguments for the jobs active since a time (UTC:
// Jobs runs sacct with TZ=UTC): every
// user's job allocations (-X: no steps), parsable, no header.
func (s *Sacct) Args(since time.Time) []string {
	return []string{"--allusers", "--allocations", "--parsable2", "--noheader",
		"--format=" + strings.Join(SacctFields, ","),
		"--starttime=" + since.UTC().Format("2006-01-02T15:04:05"), "--endtime=now"}
}

// Jobs runs sacct. Times come as Unix seconds (SLURM_TIME_FORMAT=%s), so
// no time zone is guessed.
func (s *Sacct) Jobs(ctx context.Context, since time.Time) ([]units.Unit, error) {
	path := s.Path
	if path == "" {
		path = "sacct"
	}
	timeout := s.Timeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, s.Args(since)...)
	cmd.Env = append(os.Environ(), "SLURM_TIME_FORMAT=%s", "TZ=UTC")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", path, err, strings.TrimSpace(stderr.String()))
	}
	return ParseSacct(out, s.Cluster)
}

// ParseSacct parses sacct's --parsable2 --noheader output of SacctFields
// (times as Unix seconds). A malformed line is an error: the store is
// better left as it was than fed half a job.
func ParseSacct(out []byte, cluster string) ([]units.Unit, error) {
	var jobs []units.Unit
	for n, line := range strings.Split(string(out), "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		f := strings.Split(line, "|")
		if extra := len(f) - len(SacctFields); extra > 0 {
			// A '|' in the job name: rejoin it.
			name := strings.Join(f[1:2+extra], "|")
			f = append(append(f[:1:1], name), f[2+extra:]...)
		}
		if len(f) != len(SacctFields) {
			return nil, fmt.Errorf("sacct line %d: %d fields, want %d: %q", n+1, len(f), len(SacctFields), line)
		}
		u, err := sacctJob(f, cluster)
		if err != nil {
			return nil, fmt.Errorf("sacct line %d: %w", n+1, err)
		}
		jobs = append(jobs, u)
	}
	return jobs, nil
}

func sacctJob(f []string, cluster string) (units.Unit, error) {
	u := units.Unit{Cluster: cluster, Kind: units.KindJob, ID: f[0], Name: f[1], User: f[2], Group: f[3],
		Project: f[4], Partition: f[5], State: state(f[7])}
	if _, err := strconv.ParseUint(strings.ReplaceAll(u.ID, "+", ""), 10, 64); err != nil {
		return u, fmt.Errorf("job id %q", u.ID)
	}
	var err error
	if u.Nodes, err = ExpandNodes(f[6]); err != nil {
		return u, err
	}
	for i, dst := range []*time.Time{&u.Submit, &u.Start, &u.End} {
		if *dst, err = epoch(f[8+i]); err != nil {
			return u, fmt.Errorf("%s: %w", SacctFields[8+i], err)
		}
	}
	if f[11] != "" {
		if u.Allocation.CPUs, err = strconv.Atoi(f[11]); err != nil || u.Allocation.CPUs < 0 {
			return u, fmt.Errorf("AllocCPUS %q", f[11])
		}
	}
	if err := tres(f[12], &u.Allocation); err != nil {
		return u, err
	}
	if u.ExitCode, err = exitCode(f[13]); err != nil {
		return u, err
	}
	return u, nil
}

// epoch parses Unix seconds; Unknown, None and 0 are unknown.
func epoch(s string) (time.Time, error) {
	switch s = strings.TrimSpace(s); s {
	case "", "Unknown", "None", "0":
		return time.Time{}, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 || v > 1<<40 {
		return time.Time{}, fmt.Errorf("time %q: want Unix seconds (SLURM_TIME_FORMAT=%%s)", s)
	}
	return time.Unix(v, 0).UTC(), nil
}

// tres reads AllocTRES ("billing=4,cpu=4,gres/gpu=2,gres/gpu:a100=2,mem=8G,node=1").
// A typed GPU entry repeats the untyped one, so the untyped count wins.
func tres(s string, a *units.Allocation) error {
	gpus, typed := -1, 0
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			continue
		}
		switch {
		case k == "cpu":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return fmt.Errorf("AllocTRES cpu %q", v)
			}
			if a.CPUs == 0 {
				a.CPUs = n
			}
		case k == "mem":
			b, err := memBytes(v)
			if err != nil {
				return fmt.Errorf("AllocTRES %w", err)
			}
			a.MemoryBytes = b
		case isGPU(k):
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return fmt.Errorf("AllocTRES %s %q", k, v)
			}
			if k == "gres/gpu" {
				gpus = n
			} else {
				typed += n
			}
		}
	}
	if gpus < 0 {
		gpus = typed
	}
	a.GPUs = gpus
	return nil
}
