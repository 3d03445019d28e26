package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"
)

// Postgres starts a throw-away PostgreSQL server (Debian's postgresql,
// installed when missing) on a temporary directory and a free port on
// 127.0.0.1, and returns a DSN for its database "postgres". The server is
// stopped and its directory removed when the test ends. As root it runs
// as user postgres, which initdb requires. When the server can't be had
// the test fails under CI and skips otherwise.
func Postgres(t testing.TB) string {
	t.Helper()
	bin := postgresBin()
	if bin == "" {
		Tool(t, "pg_ctlcluster", "postgresql")
		if bin = postgresBin(); bin == "" {
			missing(t, "PostgreSQL's initdb not found under /usr/lib/postgresql/*/bin")
			return ""
		}
	}
	dir, err := os.MkdirTemp("", "wattrace-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// Run as postgres when root (initdb refuses root); as ourselves otherwise.
	var asUser []string
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			missing(t, "no postgres user: "+err.Error())
			return ""
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		asUser = []string{"runuser", "-u", "postgres", "--"}
	}
	run := func(limit time.Duration, argv ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		argv = append(append([]string(nil), asUser...), argv...)
		out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%v: %v: %s", argv, err, lastLines(string(out), 10))
		}
		return nil
	}
	data := filepath.Join(dir, "data")
	if err := run(2*time.Minute, filepath.Join(bin, "initdb"), "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"); err != nil {
		t.Fatalf("initdb: %v", err)
	}
	port := FreePort(t)
	opts := fmt.Sprintf("-k %s -h 127.0.0.1 -p %d -c fsync=off -c full_page_writes=off", dir, port)
	pgctl := filepath.Join(bin, "pg_ctl")
	if err := run(2*time.Minute, pgctl, "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		t.Fatalf("pg_ctl start: %v\n%s", err, log)
	}
	t.Cleanup(func() {
		if err := run(time.Minute, pgctl, "-D", data, "-m", "fast", "-w", "stop"); err != nil {
			t.Errorf("pg_ctl stop: %v", err)
		}
	})
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
}

// postgresBin is the newest /usr/lib/postgresql/N/bin holding initdb.
func postgresBin() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(dirs) == 0 {
		return ""
	}
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(dirs[i]))))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(dirs[j]))))
		return vi < vj
	})
	return filepath.Dir(dirs[len(dirs)-1])
}

// FreePort asks the kernel for a free TCP port on 127.0.0.1.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
