package slurm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wattrace/wattrace/internal/units/feed"
	"github.com/wattrace/wattrace/pkg/units"
)

// Restd reads jobs from slurmrestd's accounting API
// (/slurmdb/<version>/jobs) with JWT authentication.
type Restd struct {
	// URL is slurmrestd's base URL (http://host:6820).
	URL string
	// User is sent as X-SLURM-USER-NAME.
	User string
	// TokenFile holds the JWT (X-SLURM-USER-TOKEN); it is read before
	// every request, so a rotated token is picked up.
	TokenFile string
	// Cluster is the units' cluster name.
	Cluster string
	// Client is the HTTP client (a 2 min timeout by default).
	Client *http.Client
	// Version is the data_parser version asked for (one of RestdVersions),
	// or "" or "auto" to probe them newest first: each Slurm release serves
	// only a few (22.05 v0.0.38 alone, 26.05 v0.0.42 to v0.0.45).
	Version string

	mu sync.Mutex
	// found is the version that answered last in auto mode; it is asked
	// first, and forgotten when it is no longer served (slurmrestd
	// upgraded under a running server).
	found string
}

// RestdVersions are the data_parser versions whose jobs documents
// parseDBJobs reads, newest first.
var RestdVersions = []string{"v0.0.45", "v0.0.44", "v0.0.43", "v0.0.42", "v0.0.41", "v0.0.40", "v0.0.39", "v0.0.38"}

// ValidRestdVersion reports whether v is "auto" or one of RestdVersions.
func ValidRestdVersion(v string) bool {
	return v == "auto" || slices.Contains(RestdVersions, v)
}

// errNotServed is a version slurmrestd does not serve (404): the next one
// is tried.
var errNotServed = errors.New("not served")

var _ feed.Source = (*Restd)(nil)

// Name is "slurmrestd".
func (r *Restd) Name() string { return "slurmrestd" }

// maxBody bounds a slurmrestd answer (a day of a big site's jobs with
// their steps is tens of MB).
const maxBody = 1 << 30

// Jobs asks for the jobs active since a time.
func (r *Restd) Jobs(ctx context.Context, since time.Time) ([]units.Unit, error) {
	token, err := os.ReadFile(r.TokenFile)
	if err != nil {
		return nil, fmt.Errorf("token: %w", err)
	}
	if r.Version != "" && r.Version != "auto" {
		if !ValidRestdVersion(r.Version) {
			return nil, fmt.Errorf("slurmrestd version %q: want auto or one of %s", r.Version, strings.Join(RestdVersions, ", "))
		}
		return r.get(ctx, r.Version, since, token)
	}
	r.mu.Lock()
	found := r.found
	r.mu.Unlock()
	try := RestdVersions
	if found != "" {
		try = append([]string{found}, RestdVersions...)
	}
	var notServed []string
	for _, v := range try {
		if slices.Contains(notServed, v) {
			continue
		}
		jobs, err := r.get(ctx, v, since, token)
		if errors.Is(err, errNotServed) {
			notServed = append(notServed, v)
			continue
		}
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		r.found = v
		r.mu.Unlock()
		return jobs, nil
	}
	r.mu.Lock()
	r.found = ""
	r.mu.Unlock()
	return nil, fmt.Errorf("slurmrestd %s serves none of %s at /slurmdb/<version>/jobs", r.URL, strings.Join(RestdVersions, ", "))
}

// get asks one version's jobs; a 404 is errNotServed.
func (r *Restd) get(ctx context.Context, version string, since time.Time, token []byte) ([]units.Unit, error) {
	u, err := url.Parse(strings.TrimRight(r.URL, "/") + "/slurmdb/" + version + "/jobs")
	if err != nil {
		return nil, err
	}
	q := u.Query()
	// 22.05 refuses Unix seconds here ("not RFC7320 compliant"); it takes
	// Slurm's own time format, read in slurmrestd's time zone: UTC. Later
	// versions parse a string with the same parse_time (data_parser's
	// TIMESTAMP), so one form serves all.
	q.Set("start_time", since.UTC().Format("2006-01-02T15:04:05"))
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-SLURM-USER-NAME", r.User)
	req.Header.Set("X-SLURM-USER-TOKEN", strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(token)), "SLURM_JWT=")))
	req.Header.Set("Accept", "application/json")
	client := r.Client
	if client == nil {
		client = &http.Client{Timeout: 2 * time.Minute}
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", u.Redacted(), err)
	}
	if resp.StatusCode == http.StatusNotFound {
		return nil, fmt.Errorf("%s: %w", u.Redacted(), errNotServed)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %.200s", u.Redacted(), resp.Status, body)
	}
	return ParseRestd(body, r.Cluster)
}

// restdJobs is the part of a jobs answer (v0.0.38 to v0.0.45) that is read.
type restdJobs struct {
	Errors []struct {
		Description string `json:"description"`
		Error       string `json:"error"`
		Source      string `json:"source"`
	} `json:"errors"`
	Jobs []restdJob `json:"jobs"`
}

// restdJob is one job of a jobs answer.
type restdJob struct {
	JobID int64 `json:"job_id"`
	// SLUID: Slurm 26.05 (v0.0.45, DUMP_FUNC(SLUID) in
	// src/plugins/data_parser/v0.0.45/parsers.c): print_sluid's
	// form, "" (or null) when the job has none.
	SLUID     *string `json:"sluid"`
	Name      string  `json:"name"`
	User      string  `json:"user"`
	Group     string  `json:"group"`
	Account   string  `json:"account"`
	Partition string  `json:"partition"`
	Nodes     string  `json:"nodes"`
	// From v0.0.40 (23.11; 26.05 writes v0.0.45) flags are arrays
	// of strings (state, exit status) and numbers that may be unset
	// are {"set","infinite","number"}: these fields are read in
	// either form (flagOrString, noVal).
	State struct {
		Current json.RawMessage `json:"current"`
	} `json:"state"`
	Time struct {
		Submission json.RawMessage `json:"submission"`
		Start      json.RawMessage `json:"start"`
		End        json.RawMessage `json:"end"`
	} `json:"time"`
	ExitCode struct {
		Status     json.RawMessage `json:"status"`
		ReturnCode json.RawMessage `json:"return_code"`
		Signal     struct {
			SignalID json.RawMessage `json:"signal_id"` // v0.0.38
			ID       json.RawMessage `json:"id"`        // v0.0.40 and later
		} `json:"signal"`
	} `json:"exit_code"`
	Required struct {
		CPUs json.RawMessage `json:"CPUs"`
	} `json:"required"`
	TRES struct {
		Allocated []struct {
			Type  string  `json:"type"`
			Name  *string `json:"name"`
			Count *int64  `json:"count"`
		} `json:"allocated"`
	} `json:"tres"`
}

// ParseRestd parses a /slurmdb/<version>/jobs answer. Errors in the answer
// are an error; a job seen twice (a job id reused after slurmctld's state
// was reset) keeps its latest submission.
func ParseRestd(body []byte, cluster string) ([]units.Unit, error) {
	return parseDBJobs(body, cluster, "slurmrestd")
}

// parseDBJobs parses the openapi/dbv0.0.38 jobs document that slurmrestd
// answers and `sacct --json` prints (the same plugin writes both); source
// names it in errors.
func parseDBJobs(body []byte, cluster, source string) ([]units.Unit, error) {
	var a restdJobs
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, fmt.Errorf("%s answer: %w", source, err)
	}
	if len(a.Errors) > 0 {
		var msgs []string
		for _, e := range a.Errors {
			msgs = append(msgs, fmt.Sprintf("%s: %s (%s)", e.Source, e.Description, e.Error))
		}
		return nil, errors.New(source + ": " + strings.Join(msgs, "; "))
	}
	if a.Jobs == nil {
		// Not a jobs document (another plugin's, or a site's wrapper): nothing
		// read is better than an empty list taken for "no jobs".
		return nil, fmt.Errorf("%s answer: no jobs list", source)
	}
	byID := map[string]int{}
	var out []units.Unit
	for _, j := range a.Jobs {
		if j.JobID <= 0 {
			return nil, fmt.Errorf("%s: job id %d", source, j.JobID)
		}
		u, err := j.unit(cluster)
		if err != nil {
			return nil, fmt.Errorf("%s job %d: %w", source, j.JobID, err)
		}
		if i, dup := byID[u.ID]; dup {
			if !u.Submit.Before(out[i].Submit) {
				out[i] = u
			}
			continue
		}
		byID[u.ID] = len(out)
		out = append(out, u)
	}
	return out, nil
}

// flagOrString reads a string (v0.0.38) or, from v0.0.40, a flag array,
// whose first flag is the base (the job state, the exit status); "" when
// absent or null.
func flagOrString(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if raw[0] == '"' {
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var flags []string
	if err := json.Unmarshal(raw, &flags); err != nil {
		return "", fmt.Errorf("%.100s: want a string or an array of strings", raw)
	}
	if len(flags) > 0 {
		s = flags[0]
	}
	return s, nil
}

// noVal reads a number written plainly (v0.0.38, or null when unset in
// complex mode) or, from v0.0.40, as {"set", "infinite", "number"}; set is
// false when absent, null, unset or infinite.
func noVal(raw json.RawMessage) (v int64, set bool, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0, false, nil
	}
	if raw[0] == '{' {
		var n struct {
			Set      bool  `json:"set"`
			Infinite bool  `json:"infinite"`
			Number   int64 `json:"number"`
		}
		if err := json.Unmarshal(raw, &n); err != nil {
			return 0, false, err
		}
		if !n.Set || n.Infinite {
			return 0, false, nil
		}
		return n.Number, true, nil
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return 0, false, fmt.Errorf("%.100s: want a number", raw)
	}
	return v, true, nil
}

// unit reads j as a unit of cluster; its errors say which field is wrong.
func (j *restdJob) unit(cluster string) (units.Unit, error) {
	cur, err := flagOrString(j.State.Current)
	if err != nil {
		return units.Unit{}, fmt.Errorf("state: %w", err)
	}
	u := units.Unit{Cluster: cluster, Kind: units.KindJob, ID: strconv.FormatInt(j.JobID, 10), Name: j.Name,
		User: j.User, Group: j.Group, Project: j.Account, Partition: j.Partition, State: state(cur)}
	if j.SLUID != nil && *j.SLUID != "" {
		if !units.ValidSLUID(*j.SLUID) {
			return units.Unit{}, fmt.Errorf("sluid %.40q", *j.SLUID)
		}
		u.SLUID = *j.SLUID
	}
	if u.Nodes, err = ExpandNodes(j.Nodes); err != nil {
		return units.Unit{}, err
	}
	for _, p := range []struct {
		raw json.RawMessage
		dst *time.Time
	}{{j.Time.Submission, &u.Submit}, {j.Time.Start, &u.Start}, {j.Time.End, &u.End}} {
		v, set, err := noVal(p.raw)
		if err != nil || v < 0 || v > 1<<40 {
			return units.Unit{}, fmt.Errorf("time %s", p.raw)
		}
		if set && v > 0 {
			*p.dst = time.Unix(v, 0).UTC()
		}
	}
	if u.ExitCode, err = j.exitCode(u.State); err != nil {
		return units.Unit{}, err
	}
	if u.Allocation, err = j.allocation(); err != nil {
		return units.Unit{}, err
	}
	return u, nil
}

// exitCode is the job's exit code as sacct shows it (128 + the signal
// for a signalled job), nil when not known.
func (j *restdJob) exitCode(state string) (*int, error) {
	status, err := flagOrString(j.ExitCode.Status)
	if err != nil {
		return nil, fmt.Errorf("exit status: %w", err)
	}
	rc, rcSet, err := noVal(j.ExitCode.ReturnCode)
	if err != nil || rc < 0 || rc > 255 {
		return nil, fmt.Errorf("return code %s", j.ExitCode.ReturnCode)
	}
	sigRaw := j.ExitCode.Signal.SignalID
	if len(sigRaw) == 0 {
		sigRaw = j.ExitCode.Signal.ID
	}
	sig, sigSet, err := noVal(sigRaw)
	if err != nil || sig < 0 || sig > 127 {
		return nil, fmt.Errorf("signal %s", sigRaw)
	}
	if !rcSet {
		return nil, nil
	}
	c := int(rc)
	if status == "SIGNALED" && sigSet && sig > 0 {
		c = 128 + int(sig)
	}
	// 22.05 (v0.0.38) reports SUCCESS, 0 for a job that exited 3 (sacct:
	// 3:0, state FAILED; captured in testdata): a 0 on a failed job is
	// not believed, the code is left unknown.
	if c == 0 && state == "FAILED" {
		return nil, nil
	}
	return &c, nil
}

// allocation is what the job was allocated (TRES), its required CPUs
// when the allocation names none.
func (j *restdJob) allocation() (units.Allocation, error) {
	var al units.Allocation
	gpus, typed := int64(-1), int64(0)
	for _, t := range j.TRES.Allocated {
		if t.Count == nil || *t.Count < 0 {
			continue
		}
		name := ""
		if t.Name != nil {
			name = *t.Name
		}
		switch {
		case t.Type == "cpu":
			al.CPUs = int(*t.Count)
		case t.Type == "mem":
			al.MemoryBytes = *t.Count << 20 // MB
		case t.Type == "gres" && name == "gpu":
			gpus = *t.Count
		case t.Type == "gres" && isGPU(name):
			typed += *t.Count
		}
	}
	if gpus < 0 {
		gpus = typed
	}
	al.GPUs = int(gpus)
	if al.CPUs == 0 {
		n, set, err := noVal(j.Required.CPUs)
		if err != nil || n < 0 || n > 1<<24 {
			return units.Allocation{}, fmt.Errorf("required CPUs %s", j.Required.CPUs)
		}
		if set {
			al.CPUs = int(n)
		}
	}
	return al, nil
}
