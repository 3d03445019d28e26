package slurm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
