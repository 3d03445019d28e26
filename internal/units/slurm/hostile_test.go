package slurm

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/units/store"
	"github.com/wattrace/wattrace/pkg/units"
)

// Captured on the Slurm 22.05.8 testbed (e2e/slurm.sh with accounting):
// bob's job 3 (proj_b), and alice's jobs 2 and 4 whose names end their
// delimited record and forge another: job 2's a crude one (a job 7777 of
// bob), job 4's crafted so both halves have sacct's field count, the
// second half claiming bob's job 3 for alice and proj_a.
const (
	hostileJSON      = "testdata/sacct-json-hostile-22.05.json"
	hostilePipes     = "testdata/sacct-hostile-22.05.txt"           // -P, '|'
	hostileDelimited = "testdata/sacct-delimited-hostile-22.05.txt" // -P --delimiter=#9f3ac1e07b#
	hostileDelimiter = "#9f3ac1e07b#"
)

// checkNotForged checks what the store holds after reading the hostile
// jobs: job 3 is bob's in proj_b, alice owns only her own jobs and is in
// proj_a alone, and no job 7777 exists.
func checkNotForged(t *testing.T, st *store.Store) {
	t.Helper()
	ctx := context.Background()
	j3, err := st.Unit(ctx, units.Key{Cluster: "e2e", Kind: units.KindJob, ID: "3"})
	if err != nil {
		t.Fatal(err)
	}
	if j3.User != "bob" || j3.Project != "proj_b" || j3.Name != "bobs" {
		t.Errorf("job 3 is %s's in %s (%q), want bob's in proj_b", j3.User, j3.Project, j3.Name)
	}
	// What /api/v1/units/verify asks the store.
	for _, id := range []string{"3", "7777"} {
		if owned, err := st.Owned(ctx, "alice", []units.Key{{Cluster: "e2e", Kind: units.KindJob, ID: id}}); err != nil || owned {
			t.Errorf("alice owns job %s: %v, %v", id, owned, err)
		}
	}
	if owned, err := st.Owned(ctx, "alice", []units.Key{{Cluster: "e2e", Kind: units.KindJob, ID: "2"}, {Cluster: "e2e", Kind: units.KindJob, ID: "4"}}); err != nil || !owned {
		t.Errorf("alice does not own her jobs 2 and 4: %v, %v", owned, err)
	}
	us, err := st.Users(ctx, units.Membership{Users: []string{"alice"}})
	if err != nil || len(us) != 1 || !slices.Equal(us[0].Projects, []string{"proj_a"}) {
		t.Errorf("alice's projects %+v, %v; want proj_a only", us, err)
	}
	if _, err := st.Unit(ctx, units.Key{ID: "7777"}); err == nil {
		t.Error("the forged job 7777 was stored")
	}
}

// sync reads the jobs with the sacct at path into a fresh store.
func syncWith(t *testing.T, path string) (*store.Store, error) {
	t.Helper()
	st, err := store.Open(context.Background(), store.Config{Path: filepath.Join(t.TempDir(), "u.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := NewFeeder(&Sacct{Path: path, Cluster: "e2e"}, st, time.Minute, 24*time.Hour, nil)
	_, err = f.Sync(context.Background())
	return st, err
}

// A job name holding a newline and a forged record cannot give its owner
// another job or another project, whichever format sacct prints.
func TestSacctHostileJobName(t *testing.T) {
	jobs, err := ParseSacctJSON(mustRead(t, hostileJSON), "e2e")
	if err != nil {
		t.Fatal(err)
	}
	fromJSON := byID(t, jobs)
	got := fromJSON
	if len(jobs) != 4 || got["3"].User != "bob" || got["4"].User != "alice" || !strings.Contains(got["4"].Name, "\n3|forged") ||
		!strings.HasPrefix(got["2"].Name, "evil\n7777|") {
		t.Errorf("sacct --json: %+v", jobs)
	}
	// The captured delimiter is shorter than a drawn one: the run's.
	jobs, err = ParseSacct([]byte(strings.ReplaceAll(string(mustRead(t, hostileDelimited)), hostileDelimiter, testDelim)), "e2e", testDelim)
	if err != nil {
		t.Fatal(err)
	}
	got = byID(t, jobs)
	if len(jobs) != 4 || got["3"].User != "bob" || got["2"].Name != fromJSON["2"].Name || got["4"].Name != fromJSON["4"].Name {
		t.Errorf("delimited: %+v", jobs)
	}

	dir := t.TempDir()
	abs := func(p string) string { a, _ := filepath.Abs(p); return a }
	// A sacct with --json, as 22.05's; without an option it prints '|'
	// records, as sacct does, here only jobs 1, 3 and the crafted 4 (job
	// 2's crude forgery breaks the field count).
	withJSON := filepath.Join(dir, "sacct")
	os.WriteFile(withJSON, []byte(`#!/bin/sh
for a; do case $a in --json) exec cat `+abs(hostileJSON)+`;; --delimiter=*) exec sed "s/`+hostileDelimiter+`/${a#--delimiter=}/g" `+abs(hostileDelimited)+`;; esac; done
grep -v -e '^2|evil$' -e '^7777|' `+abs(hostilePipes)+`
`), 0o755)
	st, err := syncWith(t, withJSON)
	if err != nil {
		t.Fatal(err)
	}
	checkNotForged(t, st)
	// A sacct without --json: the delimited format, with its delimiter.
	noJSON := filepath.Join(dir, "sacct-old")
	os.WriteFile(noJSON, []byte(`#!/bin/sh
for a; do case $a in --json) echo "sacct: unrecognized option '--json'" >&2; exit 1;; --delimiter=*) exec sed "s/`+hostileDelimiter+`/${a#--delimiter=}/g" `+abs(hostileDelimited)+`;; esac; done
grep -v -e '^2|evil$' -e '^7777|' `+abs(hostilePipes)+`
`), 0o755)
	st, err = syncWith(t, noJSON)
	if err != nil {
		t.Fatal(err)
	}
	checkNotForged(t, st)
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
