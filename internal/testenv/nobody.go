package testenv

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// nobodyEnv marks the run of a test that AsNobody started.
const nobodyEnv = "WATTRACE_TEST_AS_NOBODY"

// AsNobody reports whether the calling test should do its work now: true
// when the process is not root (the work needs no privilege then) or is
// the run AsNobody started. As root it runs the test binary again, as the
// test named name only, under uid and gid 65534 with no capability at
// all (setpriv), and fails t unless that run passes: what the kernel
// refuses an unprivileged reader (another user's /proc/PID/fd, environ)
// is then tested against the real kernel. The run's TMPDIR is its own.
func AsNobody(t *testing.T, name string) bool {
	t.Helper()
	if os.Getenv(nobodyEnv) != "" || os.Geteuid() != 0 {
		return true
	}
	setpriv := Tool(t, "setpriv", "util-linux")
	dir := t.TempDir()
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	bin := filepath.Join(dir, "test.bin")
	copyExecutable(t, os.Args[0], bin)
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tmp, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all",
		bin, "-test.run=^"+name+"$", "-test.v")
	cmd.Env = append(os.Environ(), nobodyEnv+"=1", "TMPDIR="+tmp)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("%s as nobody: %v\n%s", name, err, out)
	}
	return false
}

func copyExecutable(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
