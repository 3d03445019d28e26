package testenv

import (
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Munged starts a munged of the test's own, with a fresh key, and returns
// its socket; it is stopped and its directory removed when the test ends.
// It needs root (munged's files must not be writable by others, and the
// test's users must reach the socket) and installs the munge package when
// munged is missing. A private daemon keeps the test independent of the
// machine's munged (the Slurm bed's, which another test may be stopping),
// and its key makes credentials that no other munged accepts.
func Munged(t testing.TB) (socket string) {
	t.Helper()
	RequireRoot(t)
	bin := Tool(t, "munged", "munge")
	Tool(t, "munge", "munge")
	Tool(t, "unmunge", "munge")
	// Not t.TempDir: its parents are 0700, and the socket must be
	// reachable by the users the test runs munge as. munged refuses
	// directories that others can write to (without --force), so 0755.
	dir, err := os.MkdirTemp("", "wattrace-munged-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 1024)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	// munged refuses a key file readable by group or others.
	keyFile := filepath.Join(dir, "munge.key")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		t.Fatal(err)
	}
	socket = filepath.Join(dir, "munge.socket")
	logFile := filepath.Join(dir, "munged.log")
	// In the foreground the daemon stays this test's child: it is
	// stopped by its pid, and cannot outlive a failed start unnoticed.
	// munged runs as root here, which it allows (with a warning in some
	// versions) without --force.
	cmd := exec.Command(bin, "--foreground", "--socket="+socket, "--key-file="+keyFile,
		"--pid-file="+filepath.Join(dir, "munged.pid"), "--log-file="+logFile,
		"--seed-file="+filepath.Join(dir, "munged.seed"), "--num-threads=2")
	outFile := filepath.Join(dir, "munged.out")
	out, err := os.Create(outFile)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	said := func() string { b, _ := os.ReadFile(outFile); return strings.TrimSpace(string(b)) }
	if err := cmd.Start(); err != nil {
		t.Fatalf("start munged: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		check := exec.Command("sh", "-c", `munge -S "$0" -n </dev/null | unmunge -S "$0"`, socket)
		got, err := check.CombinedOutput()
		if err == nil && strings.Contains(string(got), "STATUS:") {
			return socket
		}
		select {
		case <-exited:
			t.Fatalf("munged exited: %s", said())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("munged on %s does not answer within 10 s: %v %s; munged: %s", socket, err, got, said())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
