package slurm

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/units/feed"
	"github.com/wattrace/wattrace/internal/units/store"
	"github.com/wattrace/wattrace/pkg/units"
)

func unix(s int64) time.Time { return time.Unix(s, 0).UTC() }

func byID(t *testing.T, jobs []units.Unit) map[string]units.Unit {
	t.Helper()
	m := map[string]units.Unit{}
	for _, j := range jobs {
		m[j.ID] = j
	}
	return m
}

func code(c int) *int { return &c }

// testDelim stands for the random delimiter Sacct draws for a run.
const testDelim = "#0123456789abcdef#"

// delimited turns the captured '|'-separated output (whose names hold no
// '|') into what sacct prints with testDelim.
func delimited(out []byte) []byte {
	return []byte(strings.ReplaceAll(string(out), "|", testDelim))
}

// The jobs both fixtures describe (captured from the same Slurm).
func checkCaptured(t *testing.T, jobs map[string]units.Unit, job3Exit *int, job5State string, job5End time.Time) {
	t.Helper()
	want := map[string]units.Unit{
		"2": {Cluster: "c", Kind: units.KindJob, ID: "2", Name: "multi", User: "alice", Group: "alice", Project: "proj_a",
			Partition: "debug", Nodes: []string{"localhost"}, State: "COMPLETED", Submit: unix(1795525192), Start: unix(1795525193),
			End: unix(1795525195), Allocation: units.Allocation{CPUs: 1}, ExitCode: code(0)},
		"3": {Cluster: "c", Kind: units.KindJob, ID: "3", Name: "burn", User: "bob", Group: "bob", Project: "proj_b",
			Partition: "debug", Nodes: []string{"localhost"}, State: "FAILED", Submit: unix(1795525192), Start: unix(1795525193),
			End: unix(1795525196), Allocation: units.Allocation{CPUs: 1}, ExitCode: job3Exit},
		"4": {Cluster: "c", Kind: units.KindJob, ID: "4", Name: "tocancel", User: "alice", Group: "alice", Project: "proj_a",
			Partition: "debug", Nodes: []string{"localhost"}, State: "CANCELLED", Submit: unix(1795525192), Start: unix(1795525193),
			End: unix(1795525194), Allocation: units.Allocation{CPUs: 1}, ExitCode: code(0)},
		"5": {Cluster: "c", Kind: units.KindJob, ID: "5", Name: "running", User: "bob", Group: "bob", Project: "proj_b",
			Partition: "debug", Nodes: []string{"localhost"}, State: job5State, Submit: unix(1795525192), Start: unix(1795525193),
			End: job5End, Allocation: units.Allocation{CPUs: 1}, ExitCode: code(0)},
	}
	for id, w := range want {
		if got := jobs[id]; !reflect.DeepEqual(got, w) {
			t.Errorf("job %s:\n got %+v\nwant %+v", id, got, w)
		}
	}
}

func TestParseSacctCaptured(t *testing.T) {
	out, err := os.ReadFile("testdata/sacct-22.05.txt")
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := ParseSacct(delimited(out), "c", testDelim)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 5 {
		t.Fatalf("%d jobs, want 5", len(jobs))
	}
	checkCaptured(t, byID(t, jobs), code(3), "RUNNING", time.Time{})
}

func TestParseRestdCaptured(t *testing.T) {
	body, err := os.ReadFile("testdata/restd-jobs-22.05.json")
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := ParseRestd(body, "c")
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 5 { // job 1 twice, kept once
		t.Fatalf("%d jobs, want 5", len(jobs))
	}
	// slurmrestd 22.05 says job 3 exited 0 (sacct: 3): unknown.
	checkCaptured(t, byID(t, jobs), nil, "CANCELLED", unix(1795525203))
	body, _ = os.ReadFile("testdata/restd-error-22.05.json")
	if _, err := ParseRestd(body, "c"); err == nil || !strings.Contains(err.Error(), "start_time") {
		t.Errorf("an answer with errors: %v", err)
	}
}

func TestParseSacctShapes(t *testing.T) {
	// Fields separated by '|' here, testDelim once parsed; {pipe} is a
	// '|' inside a field.
	sep := func(s string) []byte {
		return []byte(strings.ReplaceAll(strings.ReplaceAll(s, "|", testDelim), "{pipe}", "|"))
	}
	out := sep(strings.Join([]string{
		// A '|' in the job name, GPUs typed and untyped, memory in G, a hostlist, a signal.
		"77|a{pipe}b|carol|users|proj_c|gpu|gpu[01-02,05]|TIMEOUT|1795525192|1795525193|1795525295|8|billing=8,cpu=8,gres/gpu=2,gres/gpu:a100=2,mem=4G,node=3|0:9|102|00:10:00|e2e",
		// Pending: no start, no nodes.
		"78|pend|carol|users|proj_c|gpu|None assigned|PENDING|1795525192|Unknown|Unknown|0|billing=1,cpu=1,gres/gpu:h100=1|0:0|0|00:00:00|e2e",
		// A newline in the name continues the record.
		"79|two\nlines|carol|users|proj_c|gpu|n1|COMPLETED|1|2|3|1|cpu=1|0:0|1|0|e2e",
	}, "\n"))
	jobs, err := ParseSacct(out, "c", testDelim)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 3 {
		t.Fatalf("%d jobs, want 3: %+v", len(jobs), jobs)
	}
	j := jobs[0]
	if j.Name != "a|b" || j.User != "carol" || j.Allocation != (units.Allocation{CPUs: 8, MemoryBytes: 4 << 30, GPUs: 2}) ||
		!reflect.DeepEqual(j.Nodes, []string{"gpu01", "gpu02", "gpu05"}) || *j.ExitCode != 137 || j.State != "TIMEOUT" {
		t.Errorf("job 77 %+v", j)
	}
	p := jobs[1]
	if !p.Start.IsZero() || !p.End.IsZero() || p.Nodes != nil || p.Allocation.GPUs != 1 || p.Allocation.CPUs != 1 {
		t.Errorf("job 78 %+v", p)
	}
	if n := jobs[2]; n.ID != "79" || n.Name != "two\nlines" || n.User != "carol" {
		t.Errorf("job 79 %+v", n)
	}
	for _, bad := range []string{
		"x|n|u|g|a|p|n1|COMPLETED|1|2|3|1|cpu=1|0:0|1|0|e2e",            // id
		"1|n|u|g|a|p|n1|COMPLETED|yesterday|2|3|1|cpu=1|0:0|1|0|e2e",    // time
		"1|n|u|g|a|p|n1|COMPLETED|1|2|3|1|cpu=1|0|1|0|e2e",              // exit code
		"1|n|u|g|a|p|n[3-1]|COMPLETED|1|2|3|1|cpu=1|0:0|1|0|e2e",        // hostlist
		"1|n|u|g|a|p|n1|COMPLETED|1|2|3|1|cpu=1,mem=lots|0:0|1|0|e2e",   // memory
		"1|n|u|g|a|p|n1|COMPLETED|1|2",                                  // short
		"1|n|u|g|a|p|n1|COMPLETED|1|2|3|-4|cpu=1|0:0|1|0|e2e",           // CPUs
		"1|n|u|g|a|p|n[1-99999999]|COMPLETED|1|2|3|1|cpu=1|0:0|1|0|e2e", // too many nodes
		"1|n|u|g|a|p|n1|COMPLETED|1|2|3|1|cpu=1|0:0|1|0|e2e|extra",      // a field too many
		"1|n|u\ng|a|p|n1|COMPLETED|1|2|3|1|cpu=1|0:0|1|0|e2e",           // a newline outside the name
		"1|n|u|g|a|p|n1|COMPLETED|1|2|3|1|cpu=1|0:0|1|0|e2e\n2|n",       // a record cut short
	} {
		if _, err := ParseSacct(sep(bad), "c", testDelim); err == nil {
			t.Errorf("no error for %q", bad)
		}
	}
	// '|' (sacct's default) is a delimiter a name can hold: refused.
	if _, err := ParseSacct([]byte("1|n|u|g|a|p|n1|COMPLETED|1|2|3|1|cpu=1|0:0|1|0|e2e"), "c", "|"); err == nil {
		t.Error("no error for the delimiter |")
	}
}

func TestExpandNodes(t *testing.T) {
	for in, want := range map[string][]string{
		"n1":              {"n1"},
		"n[1-3]":          {"n1", "n2", "n3"},
		"gpu[08-10],cpu1": {"gpu08", "gpu09", "gpu10", "cpu1"},
		"r[1-2]n[1,3]":    {"r1n1", "r1n3", "r2n1", "r2n3"},
		"None assigned":   nil,
		"a[1],b[2-3],c":   {"a1", "b2", "b3", "c"},
	} {
		got, err := ExpandNodes(in)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("ExpandNodes(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

// TestRestdRequest checks what is sent to slurmrestd: the version's path,
// the JWT headers (the token file re-read), start_time in Slurm's format.
func TestRestdRequest(t *testing.T) {
	body, _ := os.ReadFile("testdata/restd-jobs-22.05.json")
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		if r.Header.Get("X-SLURM-USER-TOKEN") != "tok2" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Write(body)
	}))
	defer srv.Close()
	tokenFile := filepath.Join(t.TempDir(), "jwt")
	os.WriteFile(tokenFile, []byte("SLURM_JWT=tok1\n"), 0o600)
	r := &Restd{URL: srv.URL + "/", User: "carol", TokenFile: tokenFile, Cluster: "c", Version: "v0.0.38"}
	since := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	if _, err := r.Jobs(context.Background(), since); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("refused token: %v", err)
	}
	os.WriteFile(tokenFile, []byte("tok2"), 0o600)
	jobs, err := r.Jobs(context.Background(), since)
	if err != nil || len(jobs) != 5 {
		t.Fatalf("jobs %d, %v", len(jobs), err)
	}
	if got.URL.Path != "/slurmdb/v0.0.38/jobs" || got.URL.Query().Get("start_time") != "2026-11-24T10:00:00" ||
		got.Header.Get("X-SLURM-USER-NAME") != "carol" {
		t.Errorf("request %s %v", got.URL, got.Header)
	}
}

// TestSacctRun runs a stand-in sacct (a script printing the captured
// output) to check the arguments and environment the real one gets: JSON
// first; the delimited format, with a random delimiter, from a sacct
// without --json.
func TestSacctRun(t *testing.T) {
	dir := t.TempDir()
	argsFile := filepath.Join(dir, "args")
	script := filepath.Join(dir, "sacct")
	fixture, _ := filepath.Abs("testdata/sacct-json-hostile-22.05.json")
	os.WriteFile(script, []byte("#!/bin/sh\necho \"$SLURM_TIME_FORMAT $TZ $*\" > "+argsFile+"\ncat "+fixture+"\n"), 0o755)
	s := &Sacct{Path: script, Cluster: "c"}
	since := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	jobs, err := s.Jobs(context.Background(), since)
	if err != nil || len(jobs) != 4 {
		t.Fatalf("jobs %d, %v", len(jobs), err)
	}
	args, _ := os.ReadFile(argsFile)
	if want := " UTC --allusers --allocations --json --starttime=2026-11-24T10:00:00 --endtime=now\n"; string(args) != want {
		t.Errorf("sacct ran with %q\nwant %q", args, want)
	}
	// A sacct without --json: the delimited format.
	captured, _ := filepath.Abs("testdata/sacct-22.05.txt")
	os.WriteFile(script, []byte(`#!/bin/sh
echo "$SLURM_TIME_FORMAT $TZ $*" > `+argsFile+`
for a; do case $a in --json) echo "sacct: unrecognized option '--json'" >&2; exit 1;; --delimiter=*) d=${a#--delimiter=};; esac; done
sed "s/|/$d/g" `+captured+`
`), 0o755)
	jobs, err = s.Jobs(context.Background(), since)
	if err != nil || len(jobs) != 5 {
		t.Fatalf("delimited: jobs %d, %v", len(jobs), err)
	}
	args, _ = os.ReadFile(argsFile)
	f := strings.Fields(string(args))
	if len(f) != 10 || f[0] != "%s" || f[1] != "UTC" || !strings.HasPrefix(f[6], "--delimiter=#") || len(f[6]) != len("--delimiter=")+18 ||
		f[7] != "--format="+strings.Join(SacctFields, ",") || f[8] != "--starttime=2026-11-24T10:00:00" {
		t.Errorf("delimited sacct ran with %q", args)
	}
	os.WriteFile(script, []byte("#!/bin/sh\necho 'sacct: error: Problem talking to the database' >&2\nexit 1\n"), 0o755)
	if _, err := s.Jobs(context.Background(), time.Now()); err == nil || !strings.Contains(err.Error(), "database") {
		t.Errorf("failing sacct: %v", err)
	}
}

type fakeSource struct {
	since []time.Time
	jobs  []units.Unit
}

func (f *fakeSource) Name() string { return "fake" }
func (f *fakeSource) Jobs(_ context.Context, since time.Time) ([]units.Unit, error) {
	f.since = append(f.since, since)
	return f.jobs, nil
}

// TestFeederSync stores jobs and moves the cursor: the first read goes
// lookback back, later ones from the previous read's start, less Skew.
func TestFeederSync(t *testing.T) {
	st, err := store.Open(context.Background(), store.Config{Path: filepath.Join(t.TempDir(), "u.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	body, _ := os.ReadFile("testdata/sacct-22.05.txt")
	jobs, _ := ParseSacct(delimited(body), "c", testDelim)
	src := &fakeSource{jobs: jobs}
	t1 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	now := t1
	f := feed.New(src, st, feed.Config{Scheduler: "Slurm", Cursor: CursorName, Interval: 15 * time.Minute, Lookback: 24 * time.Hour,
		Now: func() time.Time { return now }}, nil)
	if n, err := f.Sync(context.Background()); err != nil || n != 5 {
		t.Fatalf("sync %d, %v", n, err)
	}
	now = t1.Add(15 * time.Minute)
	if _, err := f.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !src.since[0].Equal(t1.Add(-24*time.Hour-feed.Skew)) || !src.since[1].Equal(t1.Add(-feed.Skew)) {
		t.Errorf("reads since %v", src.since)
	}
	u, err := st.Unit(context.Background(), units.Key{Cluster: "c", Kind: units.KindJob, ID: "3"})
	if err != nil || u.Project != "proj_b" || u.State != "FAILED" || *u.ExitCode != 3 || u.Status != units.StatusPending {
		t.Errorf("stored job 3 %+v %v", u, err)
	}
}
