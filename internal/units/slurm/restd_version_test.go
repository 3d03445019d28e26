package slurm

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/units"
)

// fakeRestd serves recorded-shape jobs documents under the data_parser
// versions a Slurm release has, and 404 under the others, as slurmrestd
// does for a path it has no plugin for.
type fakeRestd struct {
	mu     sync.Mutex
	served map[string][]byte // version → body
	asked  []string
}

func (f *fakeRestd) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := strings.CutPrefix(r.URL.Path, "/slurmdb/")
	v, ok2 := strings.CutSuffix(v, "/jobs")
	f.asked = append(f.asked, v)
	body, served := f.served[v]
	if !ok || !ok2 || !served || r.URL.Query().Get("start_time") != "2026-11-24T10:00:00" {
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"errors":[{"error":"Unable find requested URL","error_number":9202}]}`))
		return
	}
	w.Write(body)
}

func (f *fakeRestd) set(served map[string][]byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.served, f.asked = served, nil
}

func (f *fakeRestd) log() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.asked...)
}

// slurmrestd 22.05 serves v0.0.38 only, 26.05 v0.0.42 to v0.0.45 (the
// data_parser plugins of its source tree): auto finds each, remembers the
// version, finds the new one after an upgrade, and a job seen under both
// is the same unit (cluster, kind, numeric id), the 26.05 one with its
// SLUID.
func TestRestdVersionAuto(t *testing.T) {
	old, err := os.ReadFile(filepath.Join("testdata", "restd-jobs-22.05.json"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("testdata", "sacct-json-26.05-shape.json"))
	if err != nil {
		t.Fatal(err)
	}
	// Job 2 of the 22.05 capture, still listed after the upgrade.
	newDoc := []byte(strings.Replace(string(b), `"job_id": 123,`, `"job_id": 2,`, 1))
	if string(newDoc) == string(b) {
		t.Fatal("fixture unchanged")
	}
	f := &fakeRestd{}
	f.set(map[string][]byte{"v0.0.38": old})
	srv := httptest.NewServer(f)
	defer srv.Close()
	tokenFile := filepath.Join(t.TempDir(), "jwt")
	os.WriteFile(tokenFile, []byte("tok"), 0o600)
	r := &Restd{URL: srv.URL, User: "carol", TokenFile: tokenFile, Cluster: "c"}
	since := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	ctx := context.Background()

	before, err := r.Jobs(ctx, since)
	if err != nil || len(before) != 5 {
		t.Fatalf("22.05: %d jobs, %v", len(before), err)
	}
	if got := f.log(); strings.Join(got, " ") != strings.Join(RestdVersions, " ") {
		t.Errorf("22.05 probe asked %v", got)
	}
	f.set(map[string][]byte{"v0.0.38": old})
	if _, err := r.Jobs(ctx, since); err != nil {
		t.Fatal(err)
	}
	if got := f.log(); len(got) != 1 || got[0] != "v0.0.38" {
		t.Errorf("remembered version: asked %v", got)
	}

	// The upgrade: v0.0.38 is gone, v0.0.42 to v0.0.45 answer.
	f.set(map[string][]byte{"v0.0.45": newDoc, "v0.0.44": old, "v0.0.43": old, "v0.0.42": old})
	after, err := r.Jobs(ctx, since)
	if err != nil || len(after) != 4 {
		t.Fatalf("26.05: %d jobs, %v", len(after), err)
	}
	if got := f.log(); strings.Join(got, " ") != "v0.0.38 v0.0.45" {
		t.Errorf("after the upgrade asked %v", got)
	}
	key := func(u units.Unit) string { return u.Cluster + "/" + string(u.Kind) + "/" + u.ID }
	var old2, new2 units.Unit
	for _, u := range before {
		if u.ID == "2" {
			old2 = u
		}
	}
	for _, u := range after {
		if u.ID == "2" {
			new2 = u
		}
	}
	if key(old2) != "c/job/2" || key(new2) != key(old2) || old2.SLUID != "" || new2.SLUID != "sEKNKTV3WPV500" {
		t.Errorf("job 2: 22.05 %s %q, 26.05 %s %q", key(old2), old2.SLUID, key(new2), new2.SLUID)
	}
	f.set(nil)
	if _, err := r.Jobs(ctx, since); err == nil || !strings.Contains(err.Error(), "serves none") {
		t.Errorf("no version served: %v", err)
	}
	if got := f.log(); len(got) != len(RestdVersions) {
		t.Errorf("asked %v, want each version once", got)
	}
}

// A fixed version is the only one asked; an error other than 404 (a
// refused token) stops the probe rather than trying older versions.
func TestRestdVersionFixed(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "sacct-json-26.05-shape.json"))
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRestd{}
	f.set(map[string][]byte{"v0.0.45": b, "v0.0.44": b})
	srv := httptest.NewServer(f)
	defer srv.Close()
	tokenFile := filepath.Join(t.TempDir(), "jwt")
	os.WriteFile(tokenFile, []byte("tok"), 0o600)
	since := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	r := &Restd{URL: srv.URL, User: "carol", TokenFile: tokenFile, Cluster: "c26", Version: "v0.0.44"}
	jobs, err := r.Jobs(context.Background(), since)
	if err != nil || len(jobs) != 4 || jobs[0].SLUID != "sEKNKTV3WPV500" {
		t.Fatalf("%d jobs, %v", len(jobs), err)
	}
	if got := f.log(); len(got) != 1 || got[0] != "v0.0.44" {
		t.Errorf("asked %v", got)
	}
	r.Version = "v0.0.37"
	if _, err := r.Jobs(context.Background(), since); err == nil {
		t.Error("an unknown version was asked")
	}

	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
	}))
	defer refuse.Close()
	r = &Restd{URL: refuse.URL, User: "carol", TokenFile: tokenFile, Cluster: "c"}
	if _, err := r.Jobs(context.Background(), since); err == nil || !strings.Contains(err.Error(), "v0.0.45") || !strings.Contains(err.Error(), "401") {
		t.Errorf("refused: %v", err)
	}
	if !ValidRestdVersion("auto") || !ValidRestdVersion("v0.0.38") || ValidRestdVersion("v0.0.46") || ValidRestdVersion("") {
		t.Error("ValidRestdVersion")
	}
}
