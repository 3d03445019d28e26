package slurm

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/wattrace/wattrace/internal/units/feed"
	"github.com/wattrace/wattrace/pkg/units"
)

// SacctFields are the columns asked of sacct in its delimited format, in
// the order parsed. JobName is the only free text.
var SacctFields = []string{"JobIDRaw", "JobName", "User", "Group", "Account", "Partition", "NodeList",
	"State", "Submit", "Start", "End", "AllocCPUS", "AllocTRES", "ExitCode", "ElapsedRaw", "TotalCPU", "Cluster"}

// Sacct reads jobs with the sacct command.
//
// A job name is free text its owner chooses, newlines and '|' included,
// and sacct's delimited output does not escape it: a name can end one
// record and forge the next one (another job's id, the owner's user and
// account), which the API would then take for ownership. So sacct is
// asked for JSON (--json, Slurm 21.08 and later: the openapi/dbv0.0.38
// document slurmrestd also answers, strings escaped), and only a sacct
// that refuses --json for delimited records, with a delimiter drawn at
// random for each run, which no name written before can hold.
type Sacct struct {
	// Path is the sacct command ("sacct" from PATH by default).
	Path string
	// Cluster is the units' cluster name.
	Cluster string
	// Timeout bounds one run (2 min by default).
	Timeout time.Duration
}

var _ feed.Source = (*Sacct)(nil)

// Name is "sacct".
func (s *Sacct) Name() string { return "sacct" }

// JSONArgs are sacct's arguments for the jobs active since a time (UTC:
// Jobs runs sacct with TZ=UTC), as JSON: every user's job allocations
// (-X: no steps).
func (s *Sacct) JSONArgs(since time.Time) []string {
	return []string{"--allusers", "--allocations", "--json",
		"--starttime=" + since.UTC().Format("2006-01-02T15:04:05"), "--endtime=now"}
}

// Args are the delimited format's arguments: SacctFields, no header,
// fields separated by delim.
func (s *Sacct) Args(since time.Time, delim string) []string {
	return []string{"--allusers", "--allocations", "--parsable2", "--noheader", "--delimiter=" + delim,
		"--format=" + strings.Join(SacctFields, ","),
		"--starttime=" + since.UTC().Format("2006-01-02T15:04:05"), "--endtime=now"}
}

// Jobs runs sacct --json, or, where sacct has no --json, the delimited
// format with times as Unix seconds (SLURM_TIME_FORMAT=%s), so no time
// zone is guessed. (JSON times are Unix seconds already; 22.05 with
// SLURM_TIME_FORMAT=%s refuses its own default start time in --json.)
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
	out, stderr, err := run(ctx, path, s.JSONArgs(since), "TZ=UTC")
	if err == nil {
		return ParseSacctJSON(out, s.Cluster)
	}
	if !noJSON(stderr) {
		return nil, fmt.Errorf("%s --json: %w: %s", path, err, stderr)
	}
	delim, err := randomDelimiter()
	if err != nil {
		return nil, err
	}
	out, stderr, err = run(ctx, path, s.Args(since, delim), "SLURM_TIME_FORMAT=%s", "TZ=UTC")
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %s", path, err, stderr)
	}
	return ParseSacct(out, s.Cluster, delim)
}

func run(ctx context.Context, path string, args []string, env ...string) ([]byte, string, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	return out, strings.TrimSpace(stderr.String()), err
}

// noJSON reports whether sacct's complaint is that it has no --json (a
// release before 21.08: getopt's "unrecognized option", or one built
// without the JSON serializer or its openapi plugin), rather than a
// failure that the delimited format would meet too.
func noJSON(stderr string) bool {
	s := strings.ToLower(stderr)
	return strings.Contains(s, "unrecognized option") || strings.Contains(s, "invalid option") ||
		strings.Contains(s, "serializer") || strings.Contains(s, "openapi") || strings.Contains(s, "data_parser")
}

// minDelimiter is the shortest delimiter ParseSacct accepts: one drawn
// at random is 16 hex digits between two '#' (printable: sacct 22.05
// was run with such a delimiter).
const minDelimiter = 16

func randomDelimiter() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("sacct delimiter: %w", err)
	}
	return "#" + hex.EncodeToString(b[:]) + "#", nil
}

// ParseSacctJSON parses `sacct --json` (Slurm 22.05: the openapi/dbv0.0.38
// jobs document, as slurmrestd answers).
func ParseSacctJSON(out []byte, cluster string) ([]units.Unit, error) {
	return parseDBJobs(out, cluster, "sacct --json")
}

// ParseSacct parses sacct's --parsable2 --noheader output of SacctFields
// (times as Unix seconds) separated by delim, which must be one no job
// name can hold: drawn at random for the run, at least minDelimiter long.
// A record is exactly len(SacctFields) fields; a newline inside a job
// name continues its record on the next line, which only the delimiter
// count tells apart, and a newline anywhere else, a field too many, a job
// id that does not parse: each is an error, since the store is better
// left as it was than fed a record that may be forged.
func ParseSacct(out []byte, cluster, delim string) ([]units.Unit, error) {
	if len(delim) < minDelimiter {
		return nil, fmt.Errorf("sacct delimiter %q: a job name can hold it; want a random one of %d bytes or more", delim, minDelimiter)
	}
	var jobs []units.Unit
	lines := strings.Split(string(out), "\n")
	for n := 0; n < len(lines); n++ {
		first := n + 1
		rec := lines[n]
		if strings.TrimSpace(rec) == "" {
			continue
		}
		// A newline in a name splits its record: join lines until the
		// record has its delimiters.
		for strings.Count(rec, delim) < len(SacctFields)-1 && n+1 < len(lines) {
			n++
			rec += "\n" + lines[n]
		}
		rec = strings.TrimSuffix(rec, "\r")
		f := strings.Split(rec, delim)
		if len(f) != len(SacctFields) {
			return nil, fmt.Errorf("sacct record at line %d: %d fields, want %d: %.200q", first, len(f), len(SacctFields), rec)
		}
		for i, v := range f {
			if i != 1 && strings.ContainsAny(v, "\r\n") {
				return nil, fmt.Errorf("sacct record at line %d: a newline in %s: %.200q", first, SacctFields[i], rec)
			}
		}
		u, err := sacctJob(f, cluster)
		if err != nil {
			return nil, fmt.Errorf("sacct record at line %d: %w", first, err)
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
