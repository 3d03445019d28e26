package measure

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/internal/testenv"
)

// The command gets argv[0] as the user wrote it, not the path LookPath
// found: `cat` reads its own command line as "cat".
func TestArgv0AsGiven(t *testing.T) {
	testenv.RequireRoot(t)
	sys := fixturePower(t, wattsPerCPU)
	for _, place := range []string{"child", "none"} {
		code, stdout, stderr := runMain(t, "--path.sysfs", sys, "--cgroup="+place, "--", "cat", "/proc/self/cmdline")
		if code != 0 {
			t.Fatalf("--cgroup=%s: status %d: %s", place, code, stderr)
		}
		if want := "cat\x00/proc/self/cmdline\x00"; stdout != want {
			t.Errorf("--cgroup=%s: the command's cmdline %q, want %q", place, stdout, want)
		}
	}
}

// user + system (the child's rusage) is the command's own CPU time: on
// cgroup v1 no helper's start-up is in it, so it agrees with the
// accounting's figure within rusage's rounding.
func TestRusageIsTheCommandsOwn(t *testing.T) {
	testenv.RequireRoot(t)
	sys := fixturePower(t, wattsPerCPU)
	code, _, stderr := runMain(t, "--path.sysfs", sys, "--json", "--accounting=bpf", "-r", "5", "--", "/bin/true")
	if code != 0 {
		t.Fatalf("status %d: %s", code, stderr)
	}
	var rep Report
	if err := json.Unmarshal([]byte(stderr), &rep); err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Runs {
		us := r.UserSeconds + r.SystemSeconds
		t.Logf("run %d: user+system %.6f s, cpu %.6f s", r.Run, us, r.CPUSeconds)
		if math.Abs(us-r.CPUSeconds) > 0.001 {
			t.Errorf("run %d: user+system %.6f s, CPU %.6f s: more than rusage's rounding apart", r.Run, us, r.CPUSeconds)
		}
	}
	if !strings.Contains(rep.Hierarchy, "cpu") && rep.Hierarchy != "v2" {
		t.Errorf("hierarchy %q", rep.Hierarchy)
	}
}
