package testenv

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// lockPathEnv hands TestLockInherited's second run the lock file that its
// first run locked and passed down as descriptor 3.
const lockPathEnv = "WATTRACE_TEST_LOCK_PATH"

// free reports whether path can be locked by a new open file description
// (unlocked again at once).
func free(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// opens reports whether process pid has path open.
func opens(t *testing.T, pid int, path string) bool {
	t.Helper()
	want, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	fds, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/fd/*")
	if err != nil || len(fds) == 0 {
		t.Fatalf("fds of %d: %v", pid, err)
	}
	for _, p := range fds {
		if fi, err := os.Stat(p); err == nil && os.SameFile(fi, want) {
			return true
		}
	}
	return false
}

// TestLockNotInherited: a process the test starts while it holds the lock
// (a daemon that outlives the test) does not get the lock's descriptor, so
// the lock is free once the test ends although that process still runs.
func TestLockNotInherited(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	var daemon *exec.Cmd
	t.Run("holder", func(t *testing.T) {
		Lock(t, path)
		if free(t, path) {
			t.Fatal("the lock is free while Lock holds it")
		}
		daemon = exec.Command("sleep", "60")
		if err := daemon.Start(); err != nil {
			t.Fatal(err)
		}
		if opens(t, daemon.Process.Pid, path) {
			t.Error("a process started under the lock has its descriptor")
		}
	})
	defer Kill(daemon)
	if !free(t, path) {
		t.Error("the lock is still held after the test that took it, while the process it started runs")
	}
}

// TestLockInherited: run under the lock (flock PATH go test …, here a
// first run passing its locked descriptor to a second), Lock takes it at
// once through the inherited description instead of waiting for its own
// parent, and what the test starts does not inherit it either.
func TestLockInherited(t *testing.T) {
	if path := os.Getenv(lockPathEnv); path != "" {
		done := make(chan struct{})
		go func() {
			defer close(done)
			Lock(t, path)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Lock waits for the lock this process inherited")
		}
		child := exec.Command("sleep", "60")
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		defer Kill(child)
		if !opens(t, os.Getpid(), path) {
			t.Fatal("the inherited descriptor is not open here")
		}
		if opens(t, child.Process.Pid, path) {
			t.Error("a process started under the inherited lock has its descriptor")
		}
		return
	}
	path := filepath.Join(t.TempDir(), "lock")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLockInherited$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), lockPathEnv+"="+path)
	cmd.ExtraFiles = []*os.File{f}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the run under the lock: %v\n%s", err, out)
	}
	t.Logf("the run under the lock:\n%s", out)
	if free(t, path) {
		t.Error("the lock was released by the run under it: its parent still holds it")
	}
}
