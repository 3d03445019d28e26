// Package cgrouptest creates real cgroups and processes for tests that need
// root, and removes them again when the test ends.
package cgrouptest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// RequireRoot skips the test when not running as root, except under CI
// (CI=true), where a missing privilege must not pass silently.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("test needs root and CI=true: run the tests as root")
	}
	t.Skip("test needs root")
}

// Mkdir creates the cgroup dir (its parent must exist) and registers its
// removal: tasks still in it are moved to the parent, then it is removed.
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

// Remove moves the tasks of dir and its descendants to dir's parent and
// removes them, retrying briefly while a just-killed task is still leaving.
func Remove(t testing.TB, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			Remove(t, filepath.Join(dir, e.Name()))
		}
	}
	parent := filepath.Dir(dir)
	deadline := time.Now().Add(5 * time.Second)
	for {
		moveTasks(dir, parent)
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

func moveTasks(from, to string) {
	data, err := os.ReadFile(filepath.Join(from, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range bytes.Fields(data) {
		// A task may exit between the read and the write; ESRCH is fine.
		_ = os.WriteFile(filepath.Join(to, "cgroup.procs"), append(f, '\n'), 0)
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
