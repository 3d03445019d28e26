package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// SlurmLock is the lock file that every user of the Slurm test bed
// (e2e/slurm.sh) holds while it uses the bed.
const SlurmLock = "/tmp/lock.slurm"

// LibvirtLock is the lock file that every user of the libvirt test bed
// (e2e/libvirt.sh: its daemons, its domains, the guests' domain) holds
// while it uses the bed: one test's teardown stops the daemons and
// destroys the domains another would still be using, and a domain that
// exists counts in another test's split of the host's idle among VMs.
const LibvirtLock = "/tmp/lock.libvirt"

// Lock takes an exclusive flock(2) on path for the rest of the test,
// waiting for it as long as the test may run, and releases it at cleanup.
//
// The descriptor is close-on-exec, so nothing the test starts (a daemon
// that outlives the test: munged, slurmctld) inherits the lock and keeps
// it held after the test. When the test already runs under the lock (flock
// PATH go test …), the description it inherited is the one that holds it:
// Lock uses that one, which flock grants at once (locking anew through a
// second open would wait on the caller forever), and marks it close-on-exec
// too.
func Lock(t testing.TB, path string) {
	t.Helper()
	if fd, ok := inheritedFd(path); ok {
		unix.CloseOnExec(fd)
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err == nil {
			t.Logf("%s: held through the inherited descriptor %d", path, fd)
			return
		}
		// Inherited but not holding the lock (an ancestor opened the
		// file without locking it): lock through a descriptor of our own.
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatalf("lock %s: %v", path, err)
	}
	start := time.Now()
	var deadline time.Time
	bounded := false
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		deadline, bounded = d.Deadline()
	}
	logged := false
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if err != unix.EWOULDBLOCK {
			f.Close()
			t.Fatalf("lock %s: %v", path, err)
		}
		if bounded && time.Until(deadline) < time.Minute {
			f.Close()
			t.Fatalf("lock %s: still held by another after %v (%s)", path, time.Since(start).Round(time.Second), holders(path))
		}
		if !logged {
			t.Logf("lock %s: held by another (%s), waiting", path, holders(path))
			logged = true
		}
		time.Sleep(time.Second)
	}
	if logged {
		t.Logf("lock %s: taken after %v", path, time.Since(start).Round(time.Second))
	}
	t.Cleanup(func() {
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		f.Close()
	})
}

// inheritedFd finds a descriptor of this process open on path that this
// process did not open itself: os.File sets close-on-exec on its own, so
// an open descriptor without it came from the parent.
func inheritedFd(path string) (int, bool) {
	want, err := os.Stat(path)
	if err != nil {
		return 0, false
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, false
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd <= 2 {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Dev != want.Sys().(*syscall.Stat_t).Dev || st.Ino != want.Sys().(*syscall.Stat_t).Ino {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err == nil && flags&unix.FD_CLOEXEC == 0 {
			return fd, true
		}
	}
	return 0, false
}

// holders names the processes with path open, for the log of a wait.
func holders(path string) string {
	want, err := os.Stat(path)
	if err != nil {
		return err.Error()
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	seen := map[string]bool{}
	var s string
	for _, p := range procs {
		fi, err := os.Stat(p)
		if err != nil || !os.SameFile(fi, want) {
			continue
		}
		pid := filepath.Base(filepath.Dir(filepath.Dir(p)))
		if seen[pid] {
			continue
		}
		seen[pid] = true
		comm, _ := os.ReadFile("/proc/" + pid + "/comm")
		s += fmt.Sprintf("%s %s ", pid, string(comm[:max(0, len(comm)-1)]))
	}
	if s == "" {
		return "no process has it open"
	}
	return "open in pids " + s[:len(s)-1]
}
