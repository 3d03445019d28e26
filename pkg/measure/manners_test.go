package measure

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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

// SIGTERM before the first run, or during --idle, stops measure before
// the command ran: the status is 143 (128 + SIGTERM, not SIGINT's 130),
// and the report says the command was not measured, never that it
// exited.
func TestStoppedBeforeTheCommandRan(t *testing.T) {
	for _, idle := range []time.Duration{0, time.Second} {
		sigs := make(chan os.Signal, 1)
		sigs <- syscall.SIGTERM
		e := &Env{Meter: fakeMeter{}, Signals: sigs}
		o := Options{Command: []string{"true"}, Repeat: 2, Idle: idle, IdlePolicy: "none"}
		rep, err := Measure(context.Background(), o, e, "/bin/true", Report{})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Summary.ExitStatus != 143 || !rep.Summary.NotMeasured || len(rep.Runs) != 0 {
			t.Errorf("idle %v: summary %+v, want status 143, not measured, no runs", idle, rep.Summary)
		}
		var b strings.Builder
		if err := Write(&b, FormatTable, rep); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(b.String(), "the command exited") || !strings.Contains(b.String(), "stopped by SIGTERM") ||
			!strings.Contains(b.String(), "the command was not measured") {
			t.Errorf("idle %v: report\n%s", idle, b.String())
		}
	}
}

// --warmup N runs the command N times unrecorded; --input FILE gives each
// run the whole file on its stdin (without it, the first run would
// consume measure's stdin and the others read nothing).
func TestWarmupAndInput(t *testing.T) {
	testenv.RequireRoot(t)
	sys := fixturePower(t, wattsPerCPU)
	dir := t.TempDir()
	count, in := filepath.Join(dir, "count"), filepath.Join(dir, "in")
	if err := os.WriteFile(in, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runMain(t, "--path.sysfs", sys, "--json", "--warmup", "2", "-r", "3", "--input", in,
		"--", "sh", "-c", "echo x >> "+count+"; wc -c")
	if code != 0 {
		t.Fatalf("status %d: %s", code, stderr)
	}
	var rep Report
	if err := json.Unmarshal([]byte(stderr), &rep); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(count)
	if n := strings.Count(string(b), "x"); n != 5 || len(rep.Runs) != 3 || rep.Summary.Runs != 3 {
		t.Errorf("the command ran %d times, %d recorded; want 5 and 3", n, len(rep.Runs))
	}
	if got := strings.Fields(stdout); fmt.Sprint(got) != "[5 5 5 5 5]" {
		t.Errorf("each run's stdin size %v, want 5 bytes each time", got)
	}
	code, stdout, _ = runMain(t, "--path.sysfs", sys, "--input", "null", "-r", "2", "--", "wc", "-c")
	if code != 0 || strings.Join(strings.Fields(stdout), " ") != "0 0" {
		t.Errorf("--input null: status %d, stdout %q", code, stdout)
	}
}
