// Package pbs reads the metadata of PBS Professional and OpenPBS jobs
// (owner, group, project, queue, nodes, state, times, resources asked,
// exit status) from `qstat -x -f -F json`, finished jobs included, and
// hands it to the units store as units of kind pbs_job. Figures never come
// from here: they are the TSDB's (internal/units/updater), as for Slurm.
//
// It is read at a slow interval (15 min by default) and incrementally, as
// sacct is: each read keeps the jobs active since the previous one (minus
// a minute of skew). qstat has no time filter, so the whole job history
// the server keeps (job_history_duration) is listed and filtered here.
package pbs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/units/feed"
	"github.com/wattrace/wattrace/pkg/units"
)

// CursorName is the store cursor of the PBS feeder, apart from Slurm's so
// that a site running both reads each at its own pace.
const CursorName = "pbs"

// NewFeeder reads src into st every interval; the first read goes
// lookback back.
func NewFeeder(src feed.Source, st feed.Store, interval, lookback time.Duration, log *zap.Logger) *feed.Feeder {
	return feed.New(src, st, feed.Config{Scheduler: "PBS", Cursor: CursorName, Interval: interval, Lookback: lookback}, log)
}

// Qstat reads jobs with the qstat command.
type Qstat struct {
	// Path is the qstat command ("qstat" from PATH by default).
	Path string
	// Cluster is the units' cluster name.
	Cluster string
	// Timeout bounds one run (2 min by default).
	Timeout time.Duration
	// MaxBytes bounds qstat's output (256 MiB by default).
	MaxBytes int64
}

var _ feed.Source = (*Qstat)(nil)

// Name is "qstat".
func (q *Qstat) Name() string { return "qstat" }

// Args are qstat's arguments: every job, finished ones included (-x), in
// full (-f), as JSON (-F json; PBS Professional 14 and OpenPBS).
func (q *Qstat) Args() []string { return []string{"-x", "-f", "-F", "json"} }

// Jobs runs qstat with TZ=UTC (it prints times with ctime(3), in the
// local zone and without one) and keeps the jobs active since since.
func (q *Qstat) Jobs(ctx context.Context, since time.Time) ([]units.Unit, error) {
	path := q.Path
	if path == "" {
		path = "qstat"
	}
	timeout := q.Timeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	limit := q.MaxBytes
	if limit == 0 {
		limit = 256 << 20
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, q.Args()...)
	cmd.Env = append(os.Environ(), "TZ=UTC")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out, rerr := io.ReadAll(io.LimitReader(stdout, limit+1))
	werr := cmd.Wait()
	if rerr != nil {
		return nil, fmt.Errorf("%s: %w", path, rerr)
	}
	if int64(len(out)) > limit {
		return nil, fmt.Errorf("%s: output over %d bytes", path, limit)
	}
	if werr != nil {
		return nil, fmt.Errorf("%s: %w: %s", path, werr, strings.TrimSpace(stderr.String()))
	}
	jobs, err := ParseQstatJSON(out, q.Cluster)
	if err != nil {
		return nil, err
	}
	return Active(jobs, since), nil
}

// Active keeps the jobs that started and had not ended before since: a
// job that never ran (deleted while queued) used nothing, and its unit
// would stay pending for want of series.
func Active(jobs []units.Unit, since time.Time) []units.Unit {
	out := jobs[:0:0]
	for _, j := range jobs {
		if j.Start.IsZero() || (!j.End.IsZero() && j.End.Before(since)) {
			continue
		}
		out = append(out, j)
	}
	return out
}

// Limits on what a record may hold.
var (
	// A job id as the server writes it: <sequence>[<index>].<server>.
	reJobID = regexp.MustCompile(`^[0-9]{1,12}(?:\[[0-9]{0,12}\])?\.[A-Za-z0-9][A-Za-z0-9.-]{0,254}$`)
	// A POSIX user or group name (and what sites use: dots, a final $).
	reName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\$?$`)
	// A host name of exec_host.
	reHost = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.-]{0,254}$`)
	// Job_Owner: user@submit host.
	reOwner = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}\$?@[A-Za-z0-9][A-Za-z0-9.-]{0,254}$`)
)

// maxText bounds free-text fields (job name, project, queue).
const maxText = 1024

// The attributes read. They are the only ones whose repetition within a
// job is refused (any other may repeat without harm: it is not read).
var attrs = map[string]bool{
	"Job_Name": true, "Job_Owner": true, "euser": true, "egroup": true, "Account_Name": true, "project": true,
	"queue": true, "job_state": true, "substate": true, "Exit_status": true, "exec_host": true,
	"ctime": true, "qtime": true, "stime": true, "obittime": true, "Resource_List": true, "resources_used": true,
}

// ParseQstatJSON parses `qstat -x -f -F json` (times as ctime(3) in UTC).
//
// Every value of qstat's JSON is what pbs_json_insert_parsed made of the
// attribute's text: JSON when the text parses as JSON (so a job named 42
// has a number for its name, one named {"euser":"root"} an object), else
// a string. So nothing is decoded by type: each read attribute is checked
// for the type it must have. Identity fields (the job id, owner, group,
// project) must be plain names; a job id or one of those attributes given
// twice is an error, and the whole read is refused rather than one of the
// two believed, since the API takes the owner for access.
func ParseQstatJSON(out []byte, cluster string) ([]units.Unit, error) {
	top, err := object(out, map[string]bool{"Jobs": true, "pbs_server": true})
	if err != nil {
		return nil, fmt.Errorf("qstat json: %w", err)
	}
	raw, ok := top["Jobs"]
	if !ok {
		return nil, nil // no job at all: qstat leaves the key out
	}
	ids, bodies, err := members(raw)
	if err != nil {
		return nil, fmt.Errorf("qstat json Jobs: %w", err)
	}
	jobs := make([]units.Unit, 0, len(ids))
	for i, id := range ids {
		u, err := job(id, bodies[i], cluster)
		if err != nil {
			return nil, fmt.Errorf("qstat json job %.100q: %w", id, err)
		}
		jobs = append(jobs, u)
	}
	return jobs, nil
}

// object decodes a JSON object into its members named in want, refusing
// one of them twice; the others are skipped.
func object(data []byte, want map[string]bool) (map[string]json.RawMessage, error) {
	keys, vals, err := members(data)
	if err != nil {
		return nil, err
	}
	out := map[string]json.RawMessage{}
	for i, k := range keys {
		if !want[k] {
			continue
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%q given twice", k)
		}
		out[k] = vals[i]
	}
	return out, nil
}

// members lists a JSON object's keys and values in order, refusing a key
// given twice (encoding/json would keep the last silently).
func members(data []byte) ([]string, []json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, nil, errors.New("not an object")
	}
	var keys []string
	var vals []json.RawMessage
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		k, ok := tok.(string)
		if !ok {
			return nil, nil, errors.New("a key that is not a string")
		}
		if seen[k] {
			return nil, nil, fmt.Errorf("key %.100q given twice", k)
		}
		seen[k] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, err
		}
		keys, vals = append(keys, k), append(vals, v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, nil, errors.New("data after the object")
	}
	return keys, vals, nil
}

// scalar is a value's text: a string's content, a number's digits; false
// for anything else (an object, an array, null, a boolean).
func scalar(v json.RawMessage) (string, bool) {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return "", false
	}
	switch v[0] {
	case '"':
		var s string
		if json.Unmarshal(v, &s) != nil {
			return "", false
		}
		return s, true
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		var n json.Number
		if json.Unmarshal(v, &n) != nil {
			return "", false
		}
		return n.String(), true
	}
	return "", false
}

// text is a free-text attribute: any scalar, at most maxText bytes; ""
// when absent. A job name is its owner's to choose and names nobody, so
// its control characters become U+FFFD and an object or array (a name
// that parsed as JSON) its compact text, rather than one job's name
// refusing the whole read. Anything else (project, queue) is refused
// with control characters: the API grants access by project.
func text(a map[string]json.RawMessage, key string, free bool) (string, error) {
	v, ok := a[key]
	if !ok {
		return "", nil
	}
	s, ok := scalar(v)
	if !ok {
		if !free {
			return "", fmt.Errorf("%s %.100s: not a string", key, v)
		}
		var b bytes.Buffer
		if err := json.Compact(&b, v); err != nil {
			return "", fmt.Errorf("%s: %w", key, err)
		}
		s = b.String()
	}
	ctl := func(r rune) bool { return r < 0x20 || r == 0x7f }
	if free {
		s = strings.Map(func(r rune) rune {
			if ctl(r) {
				return '\uFFFD'
			}
			return r
		}, strings.ToValidUTF8(s, "\uFFFD"))
		if len(s) > maxText {
			s = strings.ToValidUTF8(s[:maxText], "")
		}
		return s, nil
	}
	if len(s) > maxText || strings.ContainsFunc(s, ctl) {
		return "", fmt.Errorf("%s %.100q: control characters or over %d bytes", key, s, maxText)
	}
	return s, nil
}

// name is an identity attribute: a scalar matching re, "" when absent.
func name(a map[string]json.RawMessage, key string, re *regexp.Regexp) (string, error) {
	v, ok := a[key]
	if !ok {
		return "", nil
	}
	s, ok := scalar(v)
	if !ok || !re.MatchString(s) {
		return "", fmt.Errorf("%s %.100s: not a name", key, v)
	}
	return s, nil
}

func job(id string, body json.RawMessage, cluster string) (units.Unit, error) {
	u := units.Unit{Cluster: cluster, Kind: units.KindPBSJob, ID: id}
	if !reJobID.MatchString(id) {
		return u, errors.New("not a PBS job id")
	}
	a, err := object(body, attrs)
	if err != nil {
		return u, err
	}
	if u.Name, err = text(a, "Job_Name", true); err != nil {
		return u, err
	}
	// euser is who the job runs as, which the server sets; Job_Owner
	// (user@submit host) is who submitted it, the owner where no euser
	// is printed (jobs that never ran, older servers).
	if u.User, err = name(a, "euser", reName); err != nil {
		return u, err
	}
	if u.User == "" {
		owner, err := name(a, "Job_Owner", reOwner)
		if err != nil {
			return u, err
		}
		u.User, _, _ = strings.Cut(owner, "@")
	}
	if u.User == "" {
		return u, errors.New("no owner (euser, Job_Owner)")
	}
	if u.Group, err = name(a, "egroup", reName); err != nil {
		return u, err
	}
	// The project: Account_Name (qsub -A) where given, else project
	// (qsub -P), unless it is the server's default.
	if u.Project, err = text(a, "Account_Name", false); err != nil {
		return u, err
	}
	if u.Project == "" {
		if u.Project, err = text(a, "project", false); err != nil {
			return u, err
		}
		if u.Project == "_pbs_project_default" {
			u.Project = ""
		}
	}
	if u.Partition, err = text(a, "queue", false); err != nil {
		return u, err
	}
	if u.Nodes, err = execHosts(a); err != nil {
		return u, err
	}
	for _, t := range []struct {
		key string
		dst *time.Time
	}{{"ctime", &u.Submit}, {"qtime", &u.Submit}, {"stime", &u.Start}, {"obittime", &u.End}} {
		if !t.dst.IsZero() {
			continue // ctime (created: submitted) wins over qtime (queued here)
		}
		if *t.dst, err = ctime(a, t.key); err != nil {
			return u, err
		}
	}
	if err := state(a, &u); err != nil {
		return u, err
	}
	if err := resources(a, &u.Allocation); err != nil {
		return u, err
	}
	if _, err := Used(a); err != nil {
		return u, err
	}
	return u, nil
}

// execHosts reads exec_host ("node01/0*4+node02/1*4") into host names.
func execHosts(a map[string]json.RawMessage) ([]string, error) {
	v, ok := a["exec_host"]
	if !ok {
		return nil, nil
	}
	s, ok := scalar(v)
	if !ok {
		return nil, fmt.Errorf("exec_host %.100s: not a string", v)
	}
	var out []string
	seen := map[string]bool{}
	for _, part := range strings.Split(s, "+") {
		host, _, _ := strings.Cut(part, "/")
		if !reHost.MatchString(host) {
			return nil, fmt.Errorf("exec_host %.100q: bad host %.100q", s, host)
		}
		if !seen[host] {
			seen[host] = true
			out = append(out, host)
		}
	}
	if len(out) > 100000 {
		return nil, fmt.Errorf("exec_host: %d hosts", len(out))
	}
	return out, nil
}

// ctime parses a time as qstat prints it: ctime(3) without the newline
// ("Thu Nov 27 10:00:05 2026"), in UTC since qstat runs with TZ=UTC; a
// number is taken for Unix seconds, as some releases print.
func ctime(a map[string]json.RawMessage, key string) (time.Time, error) {
	v, ok := a[key]
	if !ok {
		return time.Time{}, nil
	}
	s, ok := scalar(v)
	if !ok {
		return time.Time{}, fmt.Errorf("%s %.100s: not a time", key, v)
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n <= 0 || n > 1<<40 {
			return time.Time{}, fmt.Errorf("%s %q: not a time", key, s)
		}
		return time.Unix(n, 0).UTC(), nil
	}
	t, err := time.Parse(time.ANSIC, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %.100q: want ctime(3)'s form in UTC", key, s)
	}
	return t.UTC(), nil
}

// The substates of a finished job (src/include/job.h).
const (
	substateTerminated = 91 // deleted (qdel) or killed
	substateFinished   = 92
	substateFailed     = 93
	substateMoved      = 94
)

// state maps job_state, substate and Exit_status to Slurm's state names,
// which the API already shows, and the exit code: PBS's Exit_status is
// the script's code (0-255), 256+signal for a job killed by a signal, and
// negative for a job PBS could not run (JOB_EXEC_FAIL1 and the like).
func state(a map[string]json.RawMessage, u *units.Unit) error {
	st, ok := a["job_state"]
	if !ok {
		return errors.New("no job_state")
	}
	s, ok := scalar(st)
	if !ok || len(s) != 1 {
		return fmt.Errorf("job_state %.100s", st)
	}
	sub := -1
	if v, ok := a["substate"]; ok {
		t, ok := scalar(v)
		n, err := strconv.Atoi(t)
		if !ok || err != nil || n < 0 || n > 1000 {
			return fmt.Errorf("substate %.100s", v)
		}
		sub = n
	}
	var exit *int
	if v, ok := a["Exit_status"]; ok {
		t, ok := scalar(v)
		n, err := strconv.Atoi(t)
		if !ok || err != nil || n < -100 || n > 256+128 {
			return fmt.Errorf("exit status (Exit_status) %.100s", v)
		}
		switch {
		case n > 256:
			c := 128 + n - 256
			exit = &c
		case n >= 0 && n <= 255:
			exit = &n
		}
		// Negative: PBS did not run the job; no exit code, FAILED.
		if n < 0 {
			sub = substateFailed
		}
	}
	u.ExitCode = exit
	switch s {
	case "R", "E":
		u.State = "RUNNING"
	case "S", "U":
		u.State = "SUSPENDED"
	case "Q", "H", "W", "T", "B":
		u.State = "PENDING"
	case "F", "X":
		switch {
		case sub == substateTerminated:
			u.State = "CANCELLED"
		case sub == substateFailed:
			u.State = "FAILED"
		case sub == substateMoved:
			u.State = "MOVED"
		case exit != nil && *exit != 0:
			u.State = "FAILED"
		default:
			u.State = "COMPLETED"
		}
	case "M":
		u.State = "MOVED"
	default:
		return fmt.Errorf("job_state %q", s)
	}
	return nil
}

// resources reads Resource_List: ncpus, mem, ngpus.
func resources(a map[string]json.RawMessage, al *units.Allocation) error {
	v, ok := a["Resource_List"]
	if !ok {
		return nil
	}
	r, err := object(v, map[string]bool{"ncpus": true, "mem": true, "ngpus": true})
	if err != nil {
		return fmt.Errorf("Resource_List: %w", err)
	}
	for key, dst := range map[string]*int{"ncpus": &al.CPUs, "ngpus": &al.GPUs} {
		if v, ok := r[key]; ok {
			s, ok := scalar(v)
			n, err := strconv.Atoi(s)
			if !ok || err != nil || n < 0 || n > 1<<24 {
				return fmt.Errorf("Resource_List.%s %.100s", key, v)
			}
			*dst = n
		}
	}
	if v, ok := r["mem"]; ok {
		s, _ := scalar(v)
		b, err := Size(s)
		if err != nil {
			return fmt.Errorf("Resource_List.mem: %w", err)
		}
		al.MemoryBytes = b
	}
	return nil
}

// Usage is what resources_used says a job used. The units store keeps
// the TSDB's figures, not these; they are validated so that a record with
// a malformed one is refused whole, and offered to callers that compare.
type Usage struct {
	CPUSeconds  int64
	WallSeconds int64
	MemoryBytes int64
}

// Used reads resources_used (cput, walltime, mem) of a job's attributes.
func Used(a map[string]json.RawMessage) (Usage, error) {
	var us Usage
	v, ok := a["resources_used"]
	if !ok {
		return us, nil
	}
	r, err := object(v, map[string]bool{"cput": true, "walltime": true, "mem": true})
	if err != nil {
		return us, fmt.Errorf("resources_used: %w", err)
	}
	for key, dst := range map[string]*int64{"cput": &us.CPUSeconds, "walltime": &us.WallSeconds} {
		if v, ok := r[key]; ok {
			s, _ := scalar(v)
			if *dst, err = duration(s); err != nil {
				return us, fmt.Errorf("resources_used.%s: %w", key, err)
			}
		}
	}
	if v, ok := r["mem"]; ok {
		s, _ := scalar(v)
		if us.MemoryBytes, err = Size(s); err != nil {
			return us, fmt.Errorf("resources_used.mem: %w", err)
		}
	}
	return us, nil
}

// duration parses PBS's [[HH:]MM:]SS (hours may exceed 24).
func duration(s string) (int64, error) {
	parts := strings.Split(s, ":")
	if len(parts) > 3 || s == "" {
		return 0, fmt.Errorf("duration %.100q", s)
	}
	var total int64
	for i, p := range parts {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || n < 0 || n > 1<<32 || (i > 0 && n > 59) {
			return 0, fmt.Errorf("duration %.100q", s)
		}
		total = total*60 + n
	}
	return total, nil
}

// Size parses a PBS size: a number and b, kb, mb, gb, tb or pb (bytes
// when none; w, words, of 8 bytes), case-insensitively, powers of 1024.
func Size(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := int64(1)
	unit := strings.TrimLeft(t, "0123456789")
	num := t[:len(t)-len(unit)]
	switch unit {
	case "", "b":
	case "w":
		mult = 8
	case "kb", "kw":
		mult = 1 << 10
	case "mb", "mw":
		mult = 1 << 20
	case "gb", "gw":
		mult = 1 << 30
	case "tb", "tw":
		mult = 1 << 40
	case "pb", "pw":
		mult = 1 << 50
	default:
		return 0, fmt.Errorf("size %.100q", s)
	}
	if strings.HasSuffix(unit, "w") && unit != "w" {
		mult *= 8
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("size %.100q", s)
	}
	return n * mult, nil
}
