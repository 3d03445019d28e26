package pbs

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/units"
)

func code(c int) *int { return &c }

func at(s string) time.Time {
	t, err := time.Parse(time.ANSIC, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func byID(jobs []units.Unit) map[string]units.Unit {
	m := map[string]units.Unit{}
	for _, j := range jobs {
		m[j.ID] = j
	}
	return m
}

// The recorded-shape document: a running job, finished ones (completed,
// failed, deleted while running, deleted while queued), an array subjob,
// a job whose name parsed as a number.
func TestParseQstatJSON(t *testing.T) {
	jobs, err := ParseQstatJSON(read(t, "qstat-x-f-json-23.06.json"), "c")
	if err != nil {
		t.Fatal(err)
	}
	alloc := units.Allocation{CPUs: 4, MemoryBytes: 8 << 30, GPUs: 1}
	submit, start := at("Thu Nov 27 10:00:00 2026"), at("Thu Nov 27 10:00:05 2026")
	want := map[string]units.Unit{
		"101.pbs01": {Cluster: "c", Kind: units.KindPBSJob, ID: "101.pbs01", Name: "train", User: "alice", Group: "users", Project: "proj_a",
			Partition: "workq", Nodes: []string{"node01"}, State: "RUNNING", Submit: submit, Start: start, Allocation: alloc},
		"102.pbs01": {Cluster: "c", Kind: units.KindPBSJob, ID: "102.pbs01", Name: "post", User: "bob", Group: "users", Project: "climate",
			Partition: "workq", Nodes: []string{"node01", "node02"}, State: "COMPLETED", Submit: submit, Start: start,
			End: at("Thu Nov 27 10:30:05 2026"), Allocation: alloc, ExitCode: code(0)},
		"103.pbs01": {Cluster: "c", Kind: units.KindPBSJob, ID: "103.pbs01", Name: "burn", User: "bob", Group: "users", Project: "proj_b",
			Partition: "workq", Nodes: []string{"node01"}, State: "FAILED", Submit: submit, Start: start,
			End: at("Thu Nov 27 10:05:00 2026"), Allocation: alloc, ExitCode: code(1)},
		"104.pbs01": {Cluster: "c", Kind: units.KindPBSJob, ID: "104.pbs01", Name: "tocancel", User: "alice", Group: "users", Project: "proj_a",
			Partition: "workq", Nodes: []string{"node01"}, State: "CANCELLED", Submit: submit, Start: start,
			End: at("Thu Nov 27 10:01:00 2026"), Allocation: alloc, ExitCode: code(143)},
		"105.pbs01": {Cluster: "c", Kind: units.KindPBSJob, ID: "105.pbs01", Name: "neverran", User: "alice", Project: "proj_a",
			Partition: "workq", State: "CANCELLED", Submit: submit, Allocation: alloc},
		"106[3].pbs01": {Cluster: "c", Kind: units.KindPBSJob, ID: "106[3].pbs01", Name: "sweep", User: "alice", Group: "users", Project: "proj_a",
			Partition: "workq", Nodes: []string{"node01"}, State: "RUNNING", Submit: submit, Start: at("Thu Nov 27 10:10:00 2026"), Allocation: alloc},
		"107.pbs01": {Cluster: "c", Kind: units.KindPBSJob, ID: "107.pbs01", Name: "42", User: "bob", Group: "users", Project: "proj_b",
			Partition: "workq", Nodes: []string{"node01"}, State: "COMPLETED", Submit: submit, Start: at("Thu Nov 27 09:00:00 2026"),
			End: at("Thu Nov 27 09:30:00 2026"), Allocation: alloc, ExitCode: code(0)},
	}
	got := byID(jobs)
	if len(got) != len(want) {
		t.Errorf("%d jobs, want %d", len(got), len(want))
	}
	for id, w := range want {
		if g := got[id]; !reflect.DeepEqual(g, w) {
			t.Errorf("job %s:\n got %+v\nwant %+v", id, g, w)
		}
	}

	// Incremental: jobs active since 10:06 are the running ones and those
	// that ended since; never-run and earlier ones are left out.
	var ids []string
	for _, j := range Active(jobs, at("Thu Nov 27 10:06:00 2026")) {
		ids = append(ids, j.ID)
	}
	if strings.Join(ids, ",") != "101.pbs01,102.pbs01,106[3].pbs01" {
		t.Errorf("active since 10:06: %v", ids)
	}
}

// A job's name is its owner's text: JSON in it (which qstat prints as an
// object) or quotes and newlines (escaped) forge no other attribute.
func TestParseQstatHostileNames(t *testing.T) {
	jobs, err := ParseQstatJSON(read(t, "qstat-hostile-names.json"), "c")
	if err != nil {
		t.Fatal(err)
	}
	got := byID(jobs)
	if j := got["201.pbs01"]; j.User != "bob" || j.Name != `{"euser":"root","Job_Owner":"root@x"}` {
		t.Errorf("201: user %q name %q", j.User, j.Name)
	}
	if j := got["202.pbs01"]; j.User != "bob" || j.Name != "x\",\uFFFD\"euser\":\"root" {
		t.Errorf("202: user %q name %q", j.User, j.Name)
	}
}

// Ambiguous or malformed records refuse the whole read: the store is
// better left as it was than fed an owner that may be forged.
func TestParseQstatRefuses(t *testing.T) {
	base := string(read(t, "qstat-x-f-json-23.06.json"))
	for name, doc := range map[string]string{
		"owner twice":     strings.Replace(base, "\"euser\":\t\"alice\",", "\"euser\":\t\"alice\",\n\"euser\":\t\"root\",", 1),
		"job twice":       strings.Replace(base, "\"Jobs\":\t{", "\"Jobs\":\t{\n\"101.pbs01\": {\"euser\": \"root\", \"job_state\": \"R\"},", 1),
		"Jobs twice":      strings.Replace(base, "\"pbs_server\":\t\"pbs01\",", "\"pbs_server\":\t\"pbs01\",\n\"Jobs\": {},", 1),
		"owner not name":  strings.Replace(base, "\"euser\":\t\"alice\"", "\"euser\":\t\"al ice\"", 1),
		"owner object":    strings.Replace(base, "\"euser\":\t\"alice\"", "\"euser\":\t{\"x\":1}", 1),
		"bad id":          strings.Replace(base, "\"101.pbs01\"", "\"../101\"", 1),
		"project newline": strings.Replace(base, "\"Account_Name\":\t\"proj_a\"", "\"Account_Name\":\t\"proj_a\\nproj_b\"", 1),
		"bad time":        strings.Replace(base, "\"Thu Nov 27 10:00:05 2026\"", "\"yesterday\"", 1),
		"bad exit":        strings.Replace(base, "\"Exit_status\":\t271", "\"Exit_status\":\t\"x\"", 1),
		"bad mem":         strings.Replace(base, "\"mem\":\t\"8gb\"", "\"mem\":\t\"8 zb\"", 1),
		"trailing data":   base + "{}",
	} {
		if doc == base {
			t.Fatalf("%s: the fixture did not change", name)
		}
		if _, err := ParseQstatJSON([]byte(doc), "c"); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
}

func TestSize(t *testing.T) {
	for s, want := range map[string]int64{"8gb": 8 << 30, "1048576kb": 1 << 30, "512": 512, "2MB": 2 << 20, "1w": 8, "1kw": 8 << 10} {
		if got, err := Size(s); err != nil || got != want {
			t.Errorf("Size(%q) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"", "gb", "-1kb", "1.5gb", "99999999999999999pb"} {
		if _, err := Size(s); err == nil {
			t.Errorf("Size(%q) parsed", s)
		}
	}
}

type fakeStore struct {
	cursor time.Time
	jobs   []units.Unit
}

func (f *fakeStore) Cursor(context.Context, string) (time.Time, bool, error) {
	return f.cursor, !f.cursor.IsZero(), nil
}
func (f *fakeStore) UpsertJobs(_ context.Context, cursor string, at time.Time, jobs []units.Unit) error {
	if cursor != CursorName {
		panic(cursor)
	}
	f.cursor, f.jobs = at, jobs
	return nil
}

// The feeder runs a qstat (here a script printing the fixture) and keeps
// the jobs active since its cursor.
func TestFeederQstat(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "qstat")
	fixture, _ := filepath.Abs(filepath.Join("testdata", "qstat-x-f-json-23.06.json"))
	body := "#!/bin/sh\n[ \"$*\" = \"-x -f -F json\" ] && [ \"$TZ\" = UTC ] || { echo \"args $* TZ $TZ\" >&2; exit 2; }\ncat '" + fixture + "'\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	st := &fakeStore{cursor: at("Thu Nov 27 10:07:00 2026")}
	f := NewFeeder(&Qstat{Path: script, Cluster: "c"}, st, time.Hour, time.Hour, nil)
	n, err := f.Sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// Skew reads a minute further back: 10:06.
	if n != 3 || len(st.jobs) != 3 {
		t.Errorf("%d jobs stored: %+v", n, st.jobs)
	}
}
