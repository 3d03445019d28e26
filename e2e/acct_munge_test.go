//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/internal/units/store"
	"github.com/wattrace/wattrace/pkg/units"
)

// TestAcctMunge runs checkAcctMunge without the Slurm bed's jobs: the real
// wattrace-api (MUNGE enabled, no trusted address) over a SQLite store
// holding two jobs each of alice and bob, the real `wattrace acct` run as
// them, and a real munged of the test's own (testenv.Munged, its socket
// given to the server as api.munge.socket and to acct as --munge-socket).
// It creates the users alice, bob and carol when missing and leaves the
// Slurm bed and its munged alone, so it needs no set-up and no lock;
// TestUnitsSlurm runs the same checks on jobs Slurm ran.
func TestAcctMunge(t *testing.T) {
	requireRoot(t)
	socket := testenv.Munged(t)
	for _, u := range []string{"alice", "bob", "carol"} {
		ensureUser(t, u)
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "d.db")
	st, err := store.Open(context.Background(), store.Config{Driver: store.SQLite, Path: db})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-30 * time.Minute).Truncate(time.Second)
	jobs := map[string]*e2eJob{
		"multistep": {key: "multistep", user: "alice", account: "proj_a", id: "9101"},
		"cancelled": {key: "cancelled", user: "alice", account: "proj_a", id: "9102"},
		"short":     {key: "short", user: "bob", account: "proj_b", id: "9201"},
		"running":   {key: "running", user: "bob", account: "proj_b", id: "9202"},
	}
	var us []units.Unit
	for _, j := range jobs {
		us = append(us, units.Unit{Cluster: "e2e", Kind: units.KindJob, ID: j.id, User: j.user, Project: j.account,
			Start: start, End: start.Add(10 * time.Minute), State: "COMPLETED", Figures: units.Figures{CPUSeconds: 60}})
	}
	if err := st.UpsertJobs(context.Background(), "", start, us); err != nil {
		t.Fatal(err)
	}
	st.Close()
	port := freePort(t)
	d := &apiServer{name: "D", port: port, log: filepath.Join(dir, "d.log"), t: t, args: []string{
		fmt.Sprintf("--web.listen-address=0.0.0.0:%d", port), "--cluster=e2e", "--tsdb.url=http://127.0.0.1:1",
		"--slurm.source=none", "--store.path=" + db, "--api.admins=carol", "--log.level=debug",
		"--api.munge.enabled", fmt.Sprintf("--api.munge.audiences=http://127.0.0.1:%d", port), "--api.munge.socket=" + socket}}
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			tailFile(t, d.log, 40)
		}
	})
	d.start()
	checkAcctMunge(t, d, jobs, socket)
	if t.Failed() {
		return
	}
	b, _ := os.ReadFile(d.log)
	if n := strings.Count(string(b), "refused"); n < 8 {
		t.Errorf("D logged %d refusals, want one per refused request", n)
	}
}

// ensureUser creates the Unix user name (as e2e/slurm.sh users does) when
// it is missing; the users stay, as the Slurm bed's do. Another test may
// be adding the same user at once, so a failed useradd counts only when
// the user is still missing.
func ensureUser(t *testing.T, name string) {
	t.Helper()
	if exec.Command("id", name).Run() == nil {
		return
	}
	out, err := exec.Command("useradd", "-m", "-s", "/bin/bash", name).CombinedOutput()
	if exec.Command("id", name).Run() != nil {
		t.Fatalf("useradd %s: %v %s", name, err, out)
	}
	t.Logf("created user %s", name)
}
