package cgroupstats

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/reading"
)

// These tests create real cgroups on the host, run processes in them and
// check what Read reports against what the processes did.

const mib = 1 << 20

// startInAll starts `sh -c script` after moving it into every cgroup dir
// (the same relative path under several v1 controllers), so all of them
// account for it. The process is killed when the test ends.
func startInAll(t *testing.T, dirs []string, script string) *exec.Cmd {
	t.Helper()
	enter := `for d; do echo $$ > "$d/cgroup.procs" || exit 1; done; `
	cmd := exec.Command("/bin/sh", append([]string{"-c", enter + script, "sh"}, dirs...)...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %q: %v", script, err)
	}
	t.Cleanup(func() { testenv.Kill(cmd) })
	return cmd
}

// fillShm starts a process in dirs that writes n bytes into a tmpfs file,
// which charges the pages to its memory cgroup, and then sleeps; it returns
// once the file is complete. The file is removed when the test ends.
func fillShm(t *testing.T, dirs []string, n int) {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		testenv.Need(t, "no tmpfs at /dev/shm to charge memory with")
	}
	f := fmt.Sprintf("/dev/shm/wattrace-test-%08x", rand.Uint32())
	t.Cleanup(func() { os.Remove(f) })
	startInAll(t, dirs, fmt.Sprintf(`head -c %d /dev/zero > %s && exec sleep 1000`, n, f))
	deadline := time.Now().Add(20 * time.Second)
	for {
		if fi, err := os.Stat(f); err == nil && fi.Size() == int64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not reach %d bytes", f, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkCPU runs a busy loop for a second and checks that the cgroup's user
// plus system time grew by at least what the scheduler says the loop ran.
func checkCPU(t *testing.T, r *Reader, rel string, busy *exec.Cmd) {
	t.Helper()
	s1, err := r.Read(rel)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	rt1, err := testenv.SchedRuntime(busy.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	rt2, err := testenv.SchedRuntime(busy.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := r.Read(rel)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if !s2.Available.Has(reading.FieldCPU) {
		t.Fatalf("cpu unavailable: %b", s2.Available)
	}
	got := (s2.CPUUserSeconds + s2.CPUSystemSeconds) - (s1.CPUUserSeconds + s1.CPUSystemSeconds)
	ran := float64(rt2-rt1) / 1e9
	t.Logf("cgroup cpu grew %.3f s (user %.3f, system %.3f) while the loop ran %.3f s", got,
		s2.CPUUserSeconds-s1.CPUUserSeconds, s2.CPUSystemSeconds-s1.CPUSystemSeconds, ran)
	if ran < 0.2 {
		t.Fatalf("busy loop ran only %.3f s in a second", ran)
	}
	// The cgroup interval encloses the loop's, and the cgroup has the
	// loop and more; 2% slack for the tick-sampled cpuacct.stat fallback.
	if got < 0.98*ran || got > ran+0.5 {
		t.Errorf("cgroup cpu grew %.3f s, want about %.3f s", got, ran)
	}
}

func TestHostV1(t *testing.T) {
	testenv.RequireRoot(t)
	l, err := hostLayout()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"cpuacct", "memory"} {
		if l.V1Roots[c] == "" {
			testenv.Need(t, "no v1 %s hierarchy on this host (layout %+v)", c, l)
		}
	}
	// The same relative path under every v1 controller we read, as Slurm
	// creates a job.
	rel := fmt.Sprintf("/wattrace-test-%08x-stats", rand.Uint32())
	var dirs []string
	for _, c := range []string{"cpuacct", "memory", "blkio", "pids"} {
		if root := l.V1Roots[c]; root != "" && !slices.Contains(dirs, root+rel) {
			dirs = append(dirs, testenv.Mkdir(t, root+rel))
		}
	}
	r := NewReader(l, "")

	s, err := r.Read(rel)
	if err != nil {
		t.Fatalf("Read of the empty cgroup: %v", err)
	}
	if s.MemoryLimit != reading.Unlimited || !s.Available.Has(reading.FieldMemoryLimit) {
		t.Errorf("new cgroup's limit = %d, want Unlimited", s.MemoryLimit)
	}
	if s.Tasks != 0 || !s.Available.Has(reading.FieldTasks) {
		t.Errorf("empty cgroup has %d tasks (available %v), want 0", s.Tasks, s.Available.Has(reading.FieldTasks))
	}

	const limit = 512 * mib
	memDir := l.V1Roots["memory"] + rel
	writeFile(t, filepath.Join(memDir, "memory.limit_in_bytes"), fmt.Sprint(limit))

	// 64 MiB of tmpfs pages: page cache (shmem) charged to the cgroup.
	const fill = 64 * mib
	fillShm(t, dirs, fill)
	busy := startInAll(t, dirs, "while :; do :; done")
	checkCPU(t, r, rel, busy)

	s, err = r.Read(rel)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	t.Logf("memory current %d, rss %d, cache %d, limit %d, failcnt %d; tasks %d; io %+v",
		s.MemoryCurrent, s.MemoryRSS, s.MemoryCache, s.MemoryLimit, s.MemoryFailCount, s.Tasks, s.IO)
	if s.MemoryLimit != limit {
		t.Errorf("limit = %d, want %d", s.MemoryLimit, limit)
	}
	// The file's pages plus the two shells' own memory: a few MiB at most.
	if s.MemoryCurrent < fill || s.MemoryCurrent > fill+16*mib {
		t.Errorf("memory current = %d, want %d to %d", s.MemoryCurrent, fill, fill+16*mib)
	}
	if s.MemoryCache < fill || s.MemoryCache > s.MemoryCurrent {
		t.Errorf("memory cache = %d, want %d to current %d", s.MemoryCache, fill, s.MemoryCurrent)
	}
	if !s.Available.Has(reading.FieldMemoryRSS|reading.FieldMemoryFailCount) || s.MemoryRSS > 16*mib {
		t.Errorf("memory rss = %d (available %b), want a few pages of shell", s.MemoryRSS, s.Available)
	}
	// sleep and the busy shell.
	if s.Tasks != 2 {
		t.Errorf("tasks = %d, want 2", s.Tasks)
	}
	if s.Available.Has(reading.FieldPSICPUSome) {
		t.Logf("this kernel has cgroup v1 PSI: cpu some %.3f s", s.PSI[reading.PSICPU].SomeSeconds)
	}
	if l.V1Roots["blkio"] != "" {
		checkIO(t, r, rel, dirs)
	}
}

// checkIO writes and reads 8 MiB with O_DIRECT in a temp dir, which must
// be on a block device to be seen, and checks the cgroup's counters for
// that device, and its name, grew by at least that.
func checkIO(t *testing.T, r *Reader, rel string, dirs []string) {
	t.Helper()
	dir := blockDir(t)
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	maj, min := unix.Major(st.Dev), unix.Minor(st.Dev)
	sys := fmt.Sprintf("/sys/dev/block/%d:%d", maj, min)
	if _, err := os.Stat(filepath.Join(sys, "partition")); err == nil {
		// blkio counts a partition's IO against the whole disk.
		b, err := os.ReadFile(filepath.Join(sys, "..", "dev"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fmt.Sscanf(string(b), "%d:%d", &maj, &min); err != nil {
			t.Fatal(err)
		}
		sys = fmt.Sprintf("/sys/dev/block/%d:%d", maj, min)
	}
	uevent, err := os.ReadFile(filepath.Join(sys, "uevent"))
	if err != nil {
		testenv.Need(t, "temp dir %s is not on a block device (%d:%d): no block IO to see", dir, maj, min)
	}
	name, _ := parseDevName(uevent)
	// Since Linux 5.x blk-throttle keeps its per-cgroup IO statistics
	// only for cgroups with a throttle rule on the device, so
	// blkio.throttle.io_service_bytes stays empty on an unthrottled host.
	// A rule far above any real rate makes the kernel account the test's
	// IO without slowing it, as a Slurm or container runtime's rules do.
	for _, d := range dirs {
		for _, f := range []string{"blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device"} {
			if _, err := os.Stat(filepath.Join(d, f)); err == nil {
				writeFile(t, filepath.Join(d, f), fmt.Sprintf("%d:%d %d", maj, min, uint64(1)<<50))
			}
		}
	}

	const n = 8 * mib
	f := filepath.Join(dir, "io")
	cmd := startInAll(t, dirs, fmt.Sprintf(`dd if=/dev/zero of=%[1]s bs=1M count=8 oflag=direct 2>&1 && dd if=%[1]s of=/dev/null bs=1M iflag=direct 2>&1`, f))
	if err := cmd.Wait(); err != nil {
		testenv.Need(t, "O_DIRECT IO in %s failed (%v): no block IO to see", dir, err)
	}
	s, err := r.Read(rel)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if !s.Available.Has(reading.FieldIO) {
		t.Fatalf("io unavailable: %b", s.Available)
	}
	for _, d := range s.IO {
		if d.Major == maj && d.Minor == min {
			t.Logf("io on %s: %+v", d.Device, d)
			if d.Device != string(name) {
				t.Errorf("device name = %q, want %q", d.Device, name)
			}
			if d.WriteBytes < n || d.ReadBytes < n || d.WriteOps < 8 || d.ReadOps < 8 {
				t.Errorf("io = %+v, want at least %d bytes and 8 ops each way", d, n)
			}
			return
		}
	}
	t.Errorf("no IO for %d:%d (%s) in %+v", maj, min, name, s.IO)
}

func TestHostV2(t *testing.T) {
	testenv.RequireRoot(t)
	l, err := hostLayout()
	if err != nil {
		t.Fatal(err)
	}
	if l.V2Root == "" {
		testenv.Need(t, "no cgroup2 hierarchy on this host")
	}
	// Enable what the root offers to children; on a hybrid host the
	// controllers bound to v1 are not offered and cannot be enabled.
	offered := readWords(t, filepath.Join(l.V2Root, "cgroup.controllers"))
	for _, c := range []string{"cpu", "memory", "io", "pids"} {
		if slices.Contains(offered, c) {
			if err := os.WriteFile(filepath.Join(l.V2Root, "cgroup.subtree_control"), []byte("+"+c), 0); err != nil {
				t.Logf("enable %s: %v", c, err)
			}
		}
	}
	dir := testenv.Cgroup(t, l.V2Root, "stats")
	rel := "/" + filepath.Base(dir)
	has := readWords(t, filepath.Join(dir, "cgroup.controllers"))
	t.Logf("v2 controllers in the test cgroup: %q (root offers %q)", has, offered)
	r := NewReader(l, "")

	busy := testenv.StartIn(t, dir, testenv.Busy...)
	checkCPU(t, r, rel, busy)
	tasks := uint64(1)
	if slices.Contains(has, "memory") {
		fillShm(t, []string{dir}, 64*mib)
		tasks++
	}
	s, err := r.Read(rel)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	t.Logf("v2: %+v", s)
	if s.Tasks != tasks || !s.Available.Has(reading.FieldTasks) {
		t.Errorf("tasks = %d (available %v), want %d", s.Tasks, s.Available.Has(reading.FieldTasks), tasks)
	}
	if s.Available.Has(reading.FieldTasksRecursive) != slices.Contains(has, "pids") {
		t.Errorf("tasks from pids.current = %v, want %v", s.Available.Has(reading.FieldTasksRecursive), slices.Contains(has, "pids"))
	}
	const mem = reading.FieldMemoryCurrent | reading.FieldMemoryLimit | reading.FieldMemoryRSS | reading.FieldMemoryCache | reading.FieldMemoryFailCount
	if slices.Contains(has, "memory") {
		if !s.Available.Has(mem) {
			t.Errorf("memory fields unavailable: %b", s.Available)
		}
		if s.MemoryCurrent < 64*mib || s.MemoryCurrent > 80*mib || s.MemoryCache < 64*mib || s.MemoryLimit != reading.Unlimited {
			t.Errorf("memory current %d, cache %d, limit %d: want 64 to 80 MiB, >= 64 MiB, Unlimited",
				s.MemoryCurrent, s.MemoryCache, s.MemoryLimit)
		}
	} else if s.Available&mem != 0 || s.MemoryCurrent != 0 {
		t.Errorf("memory controller not enabled, yet memory available: %b, current %d", s.Available&mem, s.MemoryCurrent)
	}
	if !slices.Contains(has, "io") && (s.Available.Has(reading.FieldIO) || len(s.IO) != 0) {
		t.Errorf("io controller not enabled, yet io available: %+v", s.IO)
	}
	// PSI is core cgroup2: cpu.pressure exists whenever the kernel has PSI.
	if _, err := os.Stat(filepath.Join(dir, "cpu.pressure")); err == nil {
		if !s.Available.Has(reading.FieldPSICPUSome) || s.PSI[reading.PSICPU].SomeSeconds < 0 {
			t.Errorf("cpu pressure unavailable: %b", s.Available)
		}
	} else if s.Available.Has(reading.FieldPSICPUSome) {
		t.Errorf("no cpu.pressure, yet PSI available")
	}
}

func readWords(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// blockDir returns a temp dir on a block device: the test's own, or one
// under /var/tmp where /tmp is a tmpfs (Debian 13 and others), since
// tmpfs IO reaches no block device. The dir is removed when the test ends.
func blockDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err == nil && unix.Major(st.Dev) != 0 {
		return dir
	}
	dir, err := os.MkdirTemp("/var/tmp", "wattrace-test-io-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
