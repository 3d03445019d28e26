// Package testenv holds helpers for tests that need root, real cgroups and
// real processes. CI runs as root, so there a missing privilege fails the
// test instead of skipping it.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RequireRoot fails the test when not root under CI, skips it otherwise.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("this test needs root and CI is set: run the tests as root")
	}
	t.Skip("needs root (set CI to make this a failure)")
}

// Cgroup creates a child cgroup below dir (a hierarchy root, e.g.
// /sys/fs/cgroup/cpuacct) and removes it when the test ends, killing any
// process still in it first.
func Cgroup(t testing.TB, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, fmt.Sprintf("wattrace-test-%d-%s", os.Getpid(), name))
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatalf("create cgroup: %v", err)
	}
	t.Cleanup(func() { RemoveCgroup(t, p) })
	return p
}

// RemoveCgroup kills what is left in the cgroup p and removes it.
func RemoveCgroup(t testing.TB, p string) {
	for i := 0; i < 50; i++ {
		b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		pids := strings.Fields(string(b))
		for _, s := range pids {
			if pid, err := strconv.Atoi(s); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if err := os.Remove(p); err == nil || os.IsNotExist(err) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("could not remove cgroup %s", p)
}

// StartIn starts argv as a process that enters cgroup dir before it execs,
// so everything it runs is charged there. The process is killed when the
// test ends.
func StartIn(t testing.TB, dir string, argv ...string) *exec.Cmd {
	t.Helper()
	script := `echo $$ > "$0/cgroup.procs" && exec "$@"`
	cmd := exec.Command("/bin/sh", append([]string{"-c", script, dir}, argv...)...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", argv, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// Busy is a shell command line that burns CPU until killed.
var Busy = []string{"/bin/sh", "-c", "while :; do :; done"}

// SchedRuntime sums the kernel's runtime (first field of schedstat, ns) of
// every thread of pid.
func SchedRuntime(pid int) (uint64, error) {
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	if err != nil || len(files) == 0 {
		return 0, fmt.Errorf("no schedstat for pid %d: %v", pid, err)
	}
	var sum uint64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, err
		}
		fields := strings.Fields(string(b))
		v, err := strconv.ParseUint(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse %s: %w", f, err)
		}
		sum += v
	}
	return sum, nil
}

// CPUAcctUsage reads a v1 cpuacct cgroup's usage in ns.
func CPUAcctUsage(dir string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage"))
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

// Inode returns a cgroup directory's inode, which is its cgroup id.
func Inode(t testing.TB, dir string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatalf("stat %s: %v", dir, err)
	}
	return st.Ino
}

// RelDiff is |a−b| / b.
func RelDiff(a, b float64) float64 {
	if b == 0 {
		if a == 0 {
			return 0
		}
		return 1
	}
	d := (a - b) / b
	if d < 0 {
		d = -d
	}
	return d
}

// StatCPU is a process's utime+stime from /proc/PID/stat in ns, at the
// USER_HZ of 100 that the kernel reports it in.
func StatCPU(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command, which may hold spaces, start after ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat: %v %v", pid, err1, err2)
	}
	return (ut + st) * 1e7, nil
}
