package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// aptMu serialises installs within one test binary; dpkg's own lock (waited
// for with DPkg::Lock::Timeout) serialises them across processes.
var aptMu sync.Mutex

// Tool returns the path of binary, installing Debian package pkg with
// apt-get when it is missing and the test runs as root, as `make e2e`'s
// scripts do, so that the test command needs no set-up step. When the tool
// can't be had it fails under CI and skips otherwise.
func Tool(t testing.TB, binary, pkg string) string {
	t.Helper()
	if p := lookTool(binary); p != "" {
		return p
	}
	aptMu.Lock()
	defer aptMu.Unlock()
	if p := lookTool(binary); p != "" {
		return p
	}
	err := aptInstall(t, pkg)
	if p := lookTool(binary); p != "" {
		return p
	}
	missing(t, fmt.Sprintf("%s (Debian package %s) is missing and could not be installed: %v", binary, pkg, err))
	return ""
}

func lookTool(binary string) string {
	if p, err := exec.LookPath(binary); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/bin", "/usr/sbin", "/usr/local/bin"} {
		p := filepath.Join(dir, binary)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

func aptInstall(t testing.TB, pkg string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("not root")
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("no apt-get: %w", err)
	}
	// Keep the package's maintainer scripts from starting its daemon
	// (Debian's prometheus would start one on :9090).
	const policy = "/usr/sbin/policy-rc.d"
	if _, err := os.Stat(policy); os.IsNotExist(err) {
		if err := os.WriteFile(policy, []byte("#!/bin/sh\nexit 101\n"), 0o755); err == nil {
			defer os.Remove(policy)
		}
	}
	t.Logf("installing Debian package %s", pkg)
	start := time.Now()
	install := func() error {
		return aptGet(10*time.Minute, "-o", "DPkg::Lock::Timeout=300", "install", "-y", "--no-install-recommends", pkg)
	}
	// A stale package list (a fresh image) gives 404s: update, then retry.
	err := install()
	if err != nil {
		if uerr := aptGet(5*time.Minute, "update"); uerr != nil {
			return fmt.Errorf("%v; apt-get update: %v", err, uerr)
		}
		err = install()
	}
	t.Logf("apt-get install %s: %v in %v", pkg, err, time.Since(start).Round(time.Second))
	return err
}

func aptGet(limit time.Duration, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "apt-get", append([]string{"-q"}, args...)...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("apt-get %s: %v: %s", strings.Join(args, " "), err, lastLines(string(out), 5))
	}
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// missing fails the test under CI and skips it otherwise.
func missing(t testing.TB, msg string) {
	t.Helper()
	Need(t, "%s", msg)
}
