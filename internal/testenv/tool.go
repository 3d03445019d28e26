package testenv

import (
	"context"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"
)

// aptMu serialises this process's apt-get runs; dpkg's own lock (waited on
// with DPkg::Lock::Timeout) serialises them with other processes.
var aptMu sync.Mutex

// Tool returns the path of the command name. When it is missing and the
// test runs as root, it installs the Debian package pkg with apt-get, as
// `make e2e` does for its packages, so the test command needs nothing set
// up beforehand. Without root it skips, or fails when CI is set.
func Tool(t testing.TB, name, pkg string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing (Debian package %s) and the test is not root to install it", name, pkg)
		}
		t.Skipf("%s is missing (Debian package %s); run as root to have the test install it", name, pkg)
	}
	aptMu.Lock()
	defer aptMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	for _, args := range [][]string{
		{"update", "-qq"},
		{"install", "-y", "-qq", "--no-install-recommends", "-o", "DPkg::Lock::Timeout=300", pkg},
	} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("apt-get %v (for %s): %v\n%s", args, name, err, out)
		}
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("installed %s but %s is still missing: %v", pkg, name, err)
	}
	return p
}
