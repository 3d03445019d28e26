package measure

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/cgroup"
)

// The command gets argv[0] as the user wrote it, not the path LookPath
// found: `cat` reads its own command line as "cat".
func TestArgv0AsGiven(t *testing.T) {
	testenv.RequireRoot(t)
	sys := fixturePower(t, wattsPerCPU)
	for _, place := range []string{"child", "none"} {
		code, stdout, stderr := runMain(t, "--path.sysfs", sys, "--gpu=off", "--cgroup="+place, "--", "cat", "/proc/self/cmdline")
		if code != 0 {
			t.Fatalf("--cgroup=%s: status %d: %s", place, code, stderr)
		}
		if want := "cat\x00/proc/self/cmdline\x00"; stdout != want {
			t.Errorf("--cgroup=%s: the command's cmdline %q, want %q", place, stdout, want)
		}
	}
}

// user + system (the child's rusage) is the command's own CPU time: on
// cgroup v1 no helper's start-up is in it (that once put 4-5 ms of Go
// runtime start-up into a /bin/true's 1 ms), so it never exceeds the
// accounting's figure beyond rusage's rounding. The accounting may hold a
// little more: the tail of the exit the kernel runs after the parent has
// collected the rusage.
func TestRusageIsTheCommandsOwn(t *testing.T) {
	testenv.RequireRoot(t)
	sys := fixturePower(t, wattsPerCPU)
	code, _, stderr := runMain(t, "--path.sysfs", sys, "--gpu=off", "--json", "--accounting=bpf", "-r", "5", "--", "/bin/true")
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
		if us > r.CPUSeconds+100e-6 {
			t.Errorf("run %d: user+system %.6f s, CPU %.6f s: the rusage holds more than the command", r.Run, us, r.CPUSeconds)
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
	code, stdout, stderr := runMain(t, "--path.sysfs", sys, "--gpu=off", "--json", "--warmup", "2", "-r", "3", "--input", in,
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
	code, stdout, _ = runMain(t, "--path.sysfs", sys, "--gpu=off", "--input", "null", "-r", "2", "--", "wc", "-c")
	if code != 0 || strings.Join(strings.Fields(stdout), " ") != "0 0" {
		t.Errorf("--input null: status %d, stdout %q", code, stdout)
	}
}

// A cgroup an earlier measure left (its command's background process
// kept it busy) is removed by the next measure once empty; one still busy
// is named with the process that keeps it. A live measure's is left
// alone.
func TestStaleCgroupsSwept(t *testing.T) {
	testenv.RequireRoot(t)
	sys := fixturePower(t, wattsPerCPU)
	h, err := cgroup.Detect("/proc", "", "auto")
	if err != nil {
		t.Fatal(err)
	}
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead := gone.Process.Pid
	empty := filepath.Join(h.Mount, fmt.Sprintf("wattrace-measure-%d-00000000000000e1", dead))
	busy := filepath.Join(h.Mount, fmt.Sprintf("wattrace-measure-%d-00000000000000b2", dead))
	live := filepath.Join(h.Mount, fmt.Sprintf("wattrace-measure-%d-00000000000000a3", os.Getppid()))
	for _, d := range []string{empty, filepath.Join(empty, "sub"), busy, live} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Rmdir(d) })
	}
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.Kill(sleeper) })
	if err := os.WriteFile(filepath.Join(busy, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runMain(t, "--path.sysfs", sys, "--gpu=off", "--json", "--cgroup=child", "--", "true")
	if code != 0 {
		t.Fatalf("status %d: %s", code, stderr)
	}
	var rep Report
	if err := json.Unmarshal([]byte(stderr), &rep); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Errorf("the empty stale cgroup %s is still there (%v)", empty, err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("a live measure's cgroup was touched: %v", err)
	}
	want := fmt.Sprintf("%d (sleep)", sleeper.Process.Pid)
	found := false
	for _, w := range rep.Warnings {
		found = found || strings.Contains(w, busy) && strings.Contains(w, want)
	}
	if !found {
		t.Errorf("warnings %q, want %s named with %s", rep.Warnings, busy, want)
	}
}

// systemd-run failing before it runs the helper is said in words, not
// as "(<nil>)".
func TestSystemdRunFailureSaid(t *testing.T) {
	h, err := cgroup.Detect("/proc", "", "auto")
	if err != nil {
		t.Fatal(err)
	}
	self, _ := os.Executable()
	e := &Env{Meter: fakeMeter{}, Self: self, HelperArgs: []string{"measure"},
		Place: func() (*Placement, error) { return newScope("/bin/false", h), nil }}
	_, err = e.runOnce(context.Background(), "/bin/true", []string{"true"})
	if err == nil || strings.Contains(err.Error(), "<nil>") || !strings.Contains(err.Error(), "systemd-run did not start the command") {
		t.Errorf("error %v", err)
	}
}

// A zone whose idle was clamped says so in the table, not only in JSON.
func TestIdleClampShown(t *testing.T) {
	rep := goldenReport(t)
	rep.Runs[1].Zones[0].IdleClamped = true
	var b strings.Builder
	if err := Write(&b, FormatTable, rep); err != nil {
		t.Fatal(err)
	}
	key := zoneKey(rep.Runs[1].Zones[0].Zone, rep.Runs[1].Zones[0].Socket)
	if !strings.Contains(b.String(), "   "+key+strings.Repeat(" ", 11-len(key))+" idle clamped") {
		t.Errorf("no clamp in\n%s", b.String())
	}
}

// openPTY opens a pseudo-terminal pair.
func openPTY(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		testenv.Need(t, "no pseudo-terminals: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(); s.Close() })
	return m, s
}

// A Ctrl-C typed at the terminal reaches the command once, even with
// measure's stdin redirected: measure in the terminal's foreground group,
// stdin /dev/null, knows a SIGINT came from the terminal (and so does not
// forward it a second time), because it asks the controlling terminal,
// not fd 0. Outside any session's terminal it forwards.
func TestCtrlCFromTheTerminalWithStdinRedirected(t *testing.T) {
	_, slave := openPTY(t)
	self, _ := os.Executable()
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	for _, c := range []struct {
		name string
		tty  bool
		want string
	}{{"foreground of a terminal", true, "true"}, {"no terminal", false, "false"}} {
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), envTTY+"=1")
		var out strings.Builder
		cmd.Stdin, cmd.Stdout = devnull, &out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if c.tty {
			cmd.Stderr = slave
			cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, 2
		}
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(out.String()); got != c.want {
			t.Errorf("%s: typed at the terminal %s, want %s", c.name, got, c.want)
		}
	}
}

// Repeated runs on measure's own stdin, a file: a warning says the first
// run may consume it and --input gives each run the file.
func TestSharedStdinWarned(t *testing.T) {
	testenv.RequireRoot(t)
	sys := fixturePower(t, wattsPerCPU)
	in := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(in, []byte("abc"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out, errb strings.Builder
	code := Main(context.Background(), []string{"--path.sysfs", sys, "--gpu=off", "--json", "-r", "2", "--", "cat"}, f, &out, &errb, []string{"measure"})
	if code != 0 {
		t.Fatalf("status %d: %s", code, errb.String())
	}
	if out.String() != "abc" {
		t.Errorf("stdout %q: the first run reads the file, the second nothing", out.String())
	}
	if !strings.Contains(errb.String(), "--input FILE gives every run the whole file") {
		t.Errorf("no warning in %s", errb.String())
	}
}
