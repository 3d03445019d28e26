// Package testenv holds helpers for tests that need root, real cgroups and
// real processes, and removes what they made when the test ends. CI runs as
// root, so there a missing privilege fails the test instead of skipping it.
package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
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
	Need(t, "this test needs root: run the tests as root")
}

// Need is the one place that decides what becomes of a test whose host
// lacks what it needs (root, BPF, kernel BTF, a cgroup hierarchy, a tool,
// a fixture file): it skips the test on a developer's machine and fails it
// under CI (CI set to anything), whose machines are meant to have all of
// it, so a test that needs something can't quietly stop running there.
// The message says what is missing. internal/layers' TestSkipsGoThroughTestenv
// keeps tests from calling t.Skip themselves.
func Need(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatal(msg + " (CI is set, so this is a failure)")
	}
	t.Skip(msg + " (set CI to make this a failure)")
}

// NotApplicable skips a test whose subject does not exist on this host,
// CI included, for a reason no set-up can change: the numbers it checks
// are another architecture's, the kernel already has what the test makes
// it lack, the machine has the GPUs whose absence the test is about. Use
// Need instead for anything a CI machine is meant to provide.
func NotApplicable(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Skipf("not applicable here: "+format, args...)
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
	t.Cleanup(func() { Kill(cmd) })
	return cmd
}

// Cgroup creates a uniquely named child cgroup below a hierarchy root and
// registers its removal.
func Cgroup(t testing.TB, mount, name string) string {
	t.Helper()
	return Mkdir(t, filepath.Join(mount, fmt.Sprintf("wattrace-test-%08x-%s", rand.Uint32(), name)))
}

// Mkdir creates the cgroup dir (its parent must exist) and registers its
// removal: tasks still in it are killed, then it is removed.
func Mkdir(t testing.TB, dir string) string {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatalf("create cgroup: %v", err)
	}
	t.Cleanup(func() { Remove(t, dir) })
	return dir
}

// TempDir creates a uniquely named cgroup wattrace-test-XXXX directly under
// the hierarchy root mount and registers its removal.
func TempDir(t testing.TB, mount string) string {
	t.Helper()
	return Mkdir(t, filepath.Join(mount, fmt.Sprintf("wattrace-test-%08x", rand.Uint32())))
}

// Remove kills what runs in dir and its descendants (the tests own those
// processes; moving them out would leave them running) and removes the
// cgroups, retrying briefly while killed tasks are still leaving.
func Remove(t testing.TB, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			Remove(t, filepath.Join(dir, e.Name()))
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		killTasks(dir)
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("remove cgroup %s: %v", dir, err)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func killTasks(dir string) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	self := os.Getpid()
	for _, f := range bytes.Fields(data) {
		if pid, err := strconv.Atoi(string(f)); err == nil && pid != self {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// Spawn starts `sh -c script`, moves it into cgroup dir, and registers its
// kill (and reaping) to run before the cgroup's removal, provided Spawn is
// called after the Mkdir of dir.
func Spawn(t testing.TB, dir, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %q: %v", script, err)
	}
	t.Cleanup(func() { Kill(cmd) })
	Move(t, dir, cmd.Process.Pid)
	return cmd
}

// WaitIn waits until pid is listed in dir's cgroup.procs: StartIn's
// process moves itself there, which under load can take a while.
func WaitIn(t testing.TB, dir string, pid int) {
	t.Helper()
	want := strconv.Itoa(pid)
	for deadline := time.Now().Add(5 * time.Second); ; {
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			t.Fatalf("read %s/cgroup.procs: %v", dir, err)
		}
		for _, f := range strings.Fields(string(data)) {
			if f == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d did not enter %s within 5s", pid, dir)
		}
		time.Sleep(time.Millisecond)
	}
}

// Move writes pid into dir's cgroup.procs.
func Move(t testing.TB, dir string, pid int) {
	t.Helper()
	p := filepath.Join(dir, "cgroup.procs")
	if err := os.WriteFile(p, []byte(strconv.Itoa(pid)+"\n"), 0); err != nil {
		t.Fatalf("move %d into %s: %v", pid, dir, err)
	}
}

// Kill kills and reaps cmd; calling it again is harmless.
func Kill(cmd *exec.Cmd) {
	if cmd.ProcessState != nil {
		return
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

// Busy is a shell command line that burns CPU until killed.
var Busy = []string{"/bin/sh", "-c", "while :; do :; done"}

// StolenNs is the time the hypervisor has stolen from this machine's CPUs,
// all of them together (/proc/stat's steal column, in USER_HZ ticks of
// 10 ms). Perf clocks (cpu_clock, task_clock) run on through stolen time and
// the scheduler's runtime does not, so a test comparing the two allows for
// what was stolen in its window: on a VM whose host is busy that was 12-20%
// of a second, and nothing of ours.
func StolenNs(t testing.TB) float64 {
	t.Helper()
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		t.Fatalf("/proc/stat: unexpected first line %q", line)
	}
	ticks, err := strconv.ParseFloat(f[8], 64)
	if err != nil {
		t.Fatalf("/proc/stat steal: %v", err)
	}
	return ticks * 1e7
}

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

// Inode returns a cgroup directory's inode, which is its cgroup id.
func Inode(t testing.TB, dir string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatalf("stat %s: %v", dir, err)
	}
	return st.Ino
}

// LiveTasks counts the node's tasks (every thread of every process), as
// a BPF task iterator visits them.
func LiveTasks(t testing.TB) int {
	t.Helper()
	procs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range procs {
		if p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		// A process that ended since the listing has no tasks left.
		if tasks, err := os.ReadDir("/proc/" + p.Name() + "/task"); err == nil {
			n += len(tasks)
		}
	}
	return n
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

// CopyFixture copies the fixture tree src into a fresh temp dir and
// returns its root. "%3A" in names becomes ":": Go module zips reject
// colons in file names, and sysfs (intel-rapl:0, block devices 8:0) is full
// of them.
func CopyFixture(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, strings.ReplaceAll(rel, "%3A", ":"))
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatalf("copy fixture %s: %v", src, err)
	}
	return dst
}
