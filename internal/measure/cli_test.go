package measure

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Bad input: one line on stderr, a status of its own, nothing on stdout,
// never a panic (a panic would fail the test with its trace).
func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no command", nil, ExitUsage, "no command to measure"},
		{"only --", []string{"--"}, ExitUsage, "no command to measure"},
		{"-r 0", []string{"-r", "0", "--", "true"}, ExitUsage, "-r/--repeat: must be at least 1"},
		{"-r -3", []string{"-r=-3", "true"}, ExitUsage, "must be at least 1"},
		{"-r x", []string{"-r", "x", "true"}, ExitUsage, "invalid argument"},
		{"unknown flag", []string{"--frobnicate", "--", "true"}, ExitUsage, "unknown flag: --frobnicate"},
		{"json and csv", []string{"--json", "--csv", "true"}, ExitUsage, "exclude each other"},
		{"bad idle", []string{"--idle", "-1", "true"}, ExitUsage, "--idle"},
		{"bad policy", []string{"--idle-policy", "half", "true"}, ExitUsage, "unknown idle policy"},
		{"bad accounting", []string{"--accounting", "perf", "true"}, ExitUsage, "--accounting"},
		{"missing binary", []string{"--", "no-such-binary-wattrace"}, ExitNotFound, "no-such-binary-wattrace: executable file not found"},
		{"missing path", []string{"--", "/nonexistent/x"}, ExitNotFound, "/nonexistent/x"},
		{"not executable", []string{"--", notExec}, ExitNotExecutable, "permission denied"},
		// As sh, bash and zsh say: a directory exists, but cannot run.
		{"a directory", []string{"--", dir}, ExitNotExecutable, "is a directory"},
		{"bad warmup", []string{"--warmup", "-1", "--", "true"}, ExitUsage, "--warmup"},
		{"input missing", []string{"--input", "/nonexistent/in", "--", "true"}, ExitUsage, "--input"},
		{"input a directory", []string{"--input", dir, "--", "true"}, ExitUsage, "is a directory"},
		{"relative keep", []string{"--bpf.keep", "bpf", "--", "true"}, ExitUsage, "--bpf.keep"},
		{"-o unwritable", []string{"-o", "/nonexistent/dir/report", "--", "true"}, ExitSetup, "-o: open /nonexistent/dir/report"},
		{"bad country", []string{"--emissions.country", "XX", "--", "true"}, ExitUsage, "--emissions.country"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, stdout, stderr := runMain(t, c.args...)
			if code != c.code {
				t.Errorf("status %d, want %d (stderr %q)", code, c.code, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "wattrace measure: ") || !strings.Contains(lines[0], c.msg) {
				t.Errorf("stderr %q, want one line \"wattrace measure: …%s…\"", stderr, c.msg)
			}
		})
	}
}

// The distinct statuses are distinct.
func TestExitStatusesDistinct(t *testing.T) {
	seen := map[int]bool{}
	for _, c := range []int{ExitSetup, ExitUsage, ExitNotExecutable, ExitNotFound} {
		if seen[c] || c == 0 || c > 128 {
			t.Errorf("status %d reused or out of range", c)
		}
		seen[c] = true
	}
}

func TestHelp(t *testing.T) {
	code, stdout, stderr := runMain(t, "--help")
	if code != 0 || stdout != "" || !strings.Contains(stderr, "Usage: wattrace measure [flags] -- CMD") || !strings.Contains(stderr, "--repeat") {
		t.Errorf("status %d stdout %q stderr %q", code, stdout, stderr)
	}
}
