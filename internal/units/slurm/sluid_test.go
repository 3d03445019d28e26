package slurm

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/pkg/units"
)

// Slurm 26.05's jobs carry their SLUID (.jobs[].sluid, a string, "" or
// null when none); the unit keeps it for the store's alias. One that is
// not a SLUID refuses the read.
func TestDBJobsSLUID(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "restd-jobs-22.05.json"))
	if err != nil {
		t.Fatal(err)
	}
	base := string(b)
	doc := strings.Replace(base, `"job_id": 2,`, `"job_id": 2, "sluid": "sEKNKTV3WPV500",`, 1)
	doc = strings.Replace(doc, `"job_id": 3,`, `"job_id": 3, "sluid": null,`, 1)
	if doc == base {
		t.Fatal("fixture unchanged")
	}
	jobs, err := ParseRestd([]byte(doc), "c")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, j := range jobs {
		got[j.ID] = j.SLUID
	}
	if got["2"] != "sEKNKTV3WPV500" || got["3"] != "" {
		t.Errorf("sluids %v", got)
	}
	bad := strings.Replace(base, `"job_id": 2,`, `"job_id": 2, "sluid": "job_3",`, 1)
	if _, err := ParseSacctJSON([]byte(bad), "c"); err == nil {
		t.Error("a sluid that is not one was read")
	}
}

// sacct --json of Slurm 26.05 (data_parser v0.0.45; shape from the
// parser's code, see testdata/README.md): flag arrays, {set, infinite,
// number} numbers, and each job's SLUID.
func TestSacctJSON2605Shape(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "sacct-json-26.05-shape.json"))
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := ParseSacctJSON(b, "c26")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]units.Unit{}
	for _, j := range jobs {
		got[j.ID] = j
	}
	want := map[string]units.Unit{
		"123": {Cluster: "c26", Kind: units.KindJob, ID: "123", SLUID: "sEKNKTV3WPV500", Name: "train", User: "alice", Group: "alice", Project: "proj_a",
			Partition: "batch", Nodes: []string{"gpu01"}, State: "COMPLETED", Submit: unix(1795525192), Start: unix(1795525193), End: unix(1795525293),
			Allocation: units.Allocation{CPUs: 4, MemoryBytes: 4096 << 20, GPUs: 2}, ExitCode: code(0)},
		"124": {Cluster: "c26", Kind: units.KindJob, ID: "124", SLUID: "sEKNKTV3WPV501", Name: "burn", User: "bob", Group: "bob", Project: "proj_b",
			Partition: "batch", Nodes: []string{"node01"}, State: "FAILED", Submit: unix(1795525192), Start: unix(1795525193), End: unix(1795525200),
			Allocation: units.Allocation{CPUs: 1, MemoryBytes: 4096 << 20}, ExitCode: code(3)},
		"125": {Cluster: "c26", Kind: units.KindJob, ID: "125", SLUID: "sEKNKTV3WPV502", Name: "tocancel", User: "alice", Group: "alice", Project: "proj_a",
			Partition: "batch", Nodes: []string{"node01"}, State: "CANCELLED", Submit: unix(1795525192), Start: unix(1795525193), End: unix(1795525194),
			Allocation: units.Allocation{CPUs: 1, MemoryBytes: 4096 << 20}, ExitCode: code(143)},
		"126": {Cluster: "c26", Kind: units.KindJob, ID: "126", SLUID: "sEKNKTV3WPV503", Name: "running", User: "bob", Group: "bob", Project: "proj_b",
			Partition: "batch", Nodes: []string{"node01"}, State: "RUNNING", Submit: unix(1795525192), Start: unix(1795525193),
			Allocation: units.Allocation{CPUs: 2, MemoryBytes: 4096 << 20}},
	}
	if len(got) != len(want) {
		t.Errorf("%d jobs, want %d", len(got), len(want))
	}
	for id, w := range want {
		if g := got[id]; !reflect.DeepEqual(g, w) {
			t.Errorf("job %s:\n got %+v\nwant %+v", id, g, w)
		}
	}
}
