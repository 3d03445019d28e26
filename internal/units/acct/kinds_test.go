package acct

import (
	"testing"
	"time"
)

// wattrace acct lists the caller's batch jobs of either manager: Slurm's
// (kind job) and PBS's (kind pbs_job).
func TestQueryAsksForSlurmAndPBSJobs(t *testing.T) {
	env := Env{User: "alice", Getenv: func(string) string { return "" },
		Now: func() time.Time { return time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC) }, Location: time.UTC}
	q, err := (&options{}).query(env)
	if err != nil {
		t.Fatal(err)
	}
	if got := q.Get("kind"); got != "job,pbs_job" {
		t.Errorf("kind=%q, want job,pbs_job", got)
	}
}
