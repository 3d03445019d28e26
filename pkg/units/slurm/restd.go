package slurm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/wattrace/wattrace/pkg/units"
)

// Restd reads jobs from slurmrestd's accounting API (Slurm 22.05's
// /slurmdb/v0.0.38/jobs) with JWT authentication.
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
}

var _ Source = (*Restd)(nil)

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
	u, err := url.Parse(strings.TrimRight(r.URL, "/") + "/slurmdb/v0.0.38/jobs")
	if err != nil {
		return nil, err
	}
	q := u.Query()
	// 22.05 refuses Unix seconds here ("not RFC7320 compliant"); it takes
	// Slurm's own time format, read in slurmrestd's time zone: UTC.
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
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %.200s", u.Redacted(), resp.Status, body)
	}
	return ParseRestd(body, r.Cluster)
}

// restdJobs is the part of a v0.0.38 jobs answer that is read.
type restdJobs struct {
	Errors []struct {
		Description string `json:"description"`
		Error       string `json:"error"`
		Source      string `json:"source"`
	} `json:"errors"`
	Jobs []struct {
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
		State     struct {
			Current string `json:"current"`
		} `json:"state"`
		Time struct {
			Submission int64 `json:"submission"`
			Start      int64 `json:"start"`
			End        int64 `json:"end"`
		} `json:"time"`
		ExitCode struct {
			Status     string `json:"status"`
			ReturnCode *int   `json:"return_code"`
			Signal     struct {
				SignalID *int `json:"signal_id"`
			} `json:"signal"`
		} `json:"exit_code"`
		Required struct {
			CPUs int `json:"CPUs"`
		} `json:"required"`
		TRES struct {
			Allocated []struct {
				Type  string  `json:"type"`
				Name  *string `json:"name"`
				Count *int64  `json:"count"`
			} `json:"allocated"`
		} `json:"tres"`
	} `json:"jobs"`
}

// ParseRestd parses a /slurmdb/v0.0.38/jobs answer. Errors in the answer
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
		u := units.Unit{Cluster: cluster, Kind: units.KindJob, ID: strconv.FormatInt(j.JobID, 10), Name: j.Name,
			User: j.User, Group: j.Group, Project: j.Account, Partition: j.Partition, State: state(j.State.Current)}
		if j.SLUID != nil && *j.SLUID != "" {
			if !units.ValidSLUID(*j.SLUID) {
				return nil, fmt.Errorf("%s job %d: sluid %.40q", source, j.JobID, *j.SLUID)
			}
			u.SLUID = *j.SLUID
		}
		var err error
		if u.Nodes, err = ExpandNodes(j.Nodes); err != nil {
			return nil, fmt.Errorf("%s job %d: %w", source, j.JobID, err)
		}
		for _, p := range []struct {
			v   int64
			dst *time.Time
		}{{j.Time.Submission, &u.Submit}, {j.Time.Start, &u.Start}, {j.Time.End, &u.End}} {
			if p.v < 0 || p.v > 1<<40 {
				return nil, fmt.Errorf("%s job %d: time %d", source, j.JobID, p.v)
			}
			if p.v > 0 {
				*p.dst = time.Unix(p.v, 0).UTC()
			}
		}
		if rc := j.ExitCode.ReturnCode; rc != nil {
			c := *rc
			if sig := j.ExitCode.Signal.SignalID; j.ExitCode.Status == "SIGNALED" && sig != nil && *sig > 0 {
				c = 128 + *sig
			}
			// 22.05 (v0.0.38) reports SUCCESS, 0 for a job that exited
			// 3 (sacct: 3:0, state FAILED; captured in testdata): a 0 on
			// a failed job is not believed, the code is left unknown.
			if !(c == 0 && u.State == "FAILED") {
				u.ExitCode = &c
			}
		}
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
				u.Allocation.CPUs = int(*t.Count)
			case t.Type == "mem":
				u.Allocation.MemoryBytes = *t.Count << 20 // MB
			case t.Type == "gres" && name == "gpu":
				gpus = *t.Count
			case t.Type == "gres" && isGPU(name):
				typed += *t.Count
			}
		}
		if gpus < 0 {
			gpus = typed
		}
		u.Allocation.GPUs = int(gpus)
		if u.Allocation.CPUs == 0 {
			u.Allocation.CPUs = j.Required.CPUs
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
