package measure

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/wattrace/wattrace/pkg/cgroup"
)

// The helper: in a systemd scope, systemd-run moves itself into the new
// scope and execs this binary again, as Helper, which writes its cgroup
// path in the hierarchy named by helperReport to fd 3 and execs the
// command in place.
const helperReport = "WATTRACE_MEASURE_REPORT"

// IsHelper reports whether this process was started as measure's helper;
// main (and test binaries) call Helper then, before anything else.
func IsHelper() bool {
	return os.Getenv(helperReport) != ""
}

// Helper reports its cgroup and execs the command; args are "--", the
// command's path and its argv (argv[0] as the user gave it). It returns
// only when that fails, with the status to exit with.
func Helper(args []string) int {
	report := os.Getenv(helperReport)
	// The command and its children must not act as helpers.
	_ = os.Unsetenv(helperReport)
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "wattrace measure: helper started without a command")
		return ExitSetup
	}
	path, argv := args[0], args[1:]
	if report != "" {
		f := os.NewFile(3, "report")
		cg, err := ownCgroup(os.Getpid(), cgroup.Kind(report))
		if err == nil {
			_, err = f.WriteString(cg)
		}
		_ = f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "wattrace measure: report cgroup: %v\n", err)
			return ExitSetup
		}
	}
	err := syscall.Exec(path, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "wattrace measure: %s: %v\n", argv[0], err)
	if errors.Is(err, syscall.ENOENT) {
		return ExitNotFound
	}
	return ExitNotExecutable
}

// ownCgroup reads pid's cgroup path in hierarchy k from /proc.
func ownCgroup(pid int, k cgroup.Kind) (string, error) {
	return cgroupIn(fmt.Sprintf("/proc/%d/cgroup", pid), k)
}

// cgroupIn reads the cgroup path in hierarchy k from a /proc cgroup file
// (a process's, or one thread's: /proc/thread-self/cgroup).
func cgroupIn(file string, k cgroup.Kind) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 {
			continue
		}
		if k == cgroup.V2 && f[0] == "0" && f[1] == "" {
			return f[2], nil
		}
		for _, c := range strings.Split(f[1], ",") {
			if c == string(k) && k != cgroup.V2 {
				return f[2], nil
			}
		}
	}
	return "", fmt.Errorf("no %s line in %s", k, file)
}

// threadCPU is the calling thread's CPU time in nanoseconds.
func threadCPU() float64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return float64(ts.Nano())
}

// Placement is the command's own cgroup in the key hierarchy.
type Placement struct {
	// startCharge is the CPU time (ns) measure's starting thread spent in
	// the cgroup (cgroup v1): not the command's.
	startCharge float64
	// How is "child" or "systemd".
	How  string
	Dir  string
	Kind cgroup.Kind
	// id is the directory's inode: the id BPF accounting keys it by.
	id uint64
	// made is whether we created Dir (and so remove it).
	made bool
	// mount is the hierarchy's mount, under which /proc/PID/cgroup's
	// paths lie; scope and systemdRun are a systemd scope's unit and
	// the program that makes it.
	scope, systemdRun, mount string
}

// newScope is a transient systemd scope for one run; its cgroup is known
// once the helper, started by systemd-run inside it, reports it.
func newScope(systemdRun string, h cgroup.Hierarchy) *Placement {
	return &Placement{How: PlaceSystemd, Kind: h.Kind, systemdRun: systemdRun, mount: h.Mount,
		scope: uniqueName() + ".scope"}
}

// prepareScope runs the command as `systemd-run --scope … HELPER -- CMD`:
// systemd-run moves itself into the new scope and execs the helper, which
// writes its cgroup to a pipe and execs the command in place, so the
// process we wait for is the command.
func (p *Placement) prepareScope(cmd *exec.Cmd, self string, helperArgs []string) (func() error, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	argv := append([]string{cmd.Path}, cmd.Args...)
	sd := []string{p.systemdRun, "--scope", "--quiet", "--collect", "--unit=" + p.scope, "-p", "CPUAccounting=yes"}
	if os.Geteuid() != 0 {
		sd = append(sd, "--user")
	}
	sd = append(append(append(sd, "--", self), helperArgs...), append([]string{"--"}, argv...)...)
	cmd.Path, cmd.Args = p.systemdRun, sd
	cmd.Env = append(envOrSelf(cmd.Env), helperReport+"="+string(p.Kind))
	cmd.ExtraFiles = append(cmd.ExtraFiles, w)
	return func() error {
		_ = w.Close()
		defer r.Close()
		b, err := io.ReadAll(r)
		switch {
		case err != nil:
			return fmt.Errorf("systemd scope %s: reading the helper's cgroup: %w", p.scope, err)
		case len(b) == 0:
			// systemd-run failed before it ran the helper: its own
			// message is on stderr.
			return fmt.Errorf("systemd scope %s: systemd-run did not start the command (its message is above)", p.scope)
		}
		p.Dir = filepath.Join(p.mount, string(b))
		p.id, err = inode(p.Dir)
		return err
	}, nil
}

// uniqueName names one run's cgroup or scope: this process and 64
// random bits, so runs and concurrent measures never collide.
func uniqueName() string {
	return fmt.Sprintf("wattrace-measure-%d-%016x", os.Getpid(), rand.Uint64())
}

// newChild creates a child cgroup of parent (the hierarchy's root when
// empty) for one run.
func newChild(h cgroup.Hierarchy, parent string) (*Placement, error) {
	if parent == "" {
		parent = h.Mount
	}
	dir := filepath.Join(parent, uniqueName())
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup %s (run as root, or pass a delegated --cgroup.parent): %w", dir, err)
	}
	p := &Placement{How: PlaceChild, Dir: dir, Kind: h.Kind, made: true, mount: h.Mount}
	id, err := inode(dir)
	if err != nil {
		_ = p.Remove()
		return nil, err
	}
	p.id = id
	// A delegated cgroup2 parent must let us move tasks into the child.
	if h.Kind == cgroup.V2 {
		if err := syscall.Access(filepath.Join(dir, "cgroup.procs"), 2); err != nil {
			_ = p.Remove()
			return nil, fmt.Errorf("cgroup %s: cgroup.procs not writable: %w", dir, err)
		}
	}
	return p, nil
}

func inode(dir string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return 0, fmt.Errorf("stat cgroup %s: %w", dir, err)
	}
	return st.Ino, nil
}

// hooks are what runOnce calls around the command's start: start wraps
// cmd.Start (nil: called as is), started runs once it returned.
type hooks struct {
	start   func(func() error) error
	started func() error
}

// prepare sets cmd up to start in the placement; self is this binary,
// helperArgs the arguments that make it Helper.
func (p *Placement) prepare(cmd *exec.Cmd, self string, helperArgs []string) (hooks, error) {
	if p.How == PlaceSystemd {
		started, err := p.prepareScope(cmd, self, helperArgs)
		return hooks{started: started}, err
	}
	if p.Kind == cgroup.V2 {
		// clone3(CLONE_INTO_CGROUP): the child is born in the cgroup.
		f, err := os.Open(p.Dir)
		if err != nil {
			return hooks{}, fmt.Errorf("open cgroup %s: %w", p.Dir, err)
		}
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = int(f.Fd())
		return hooks{started: f.Close}, nil
	}
	// cgroup v1: clone3 cannot name a v1 cgroup, but a child is born in
	// the cgroup of the thread that forks it, and v1 moves single threads.
	// The thread that starts the command moves into the cgroup for the
	// fork and back out: the command is in it before its first
	// instruction, with no helper process to start (which cost a run
	// milliseconds, and its start-up showed in the command's rusage).
	return hooks{start: func(start func() error) error { return p.startFromThread(start) }}, nil
}

// startFromThread runs start on a thread of its own moved into the
// cgroup, then moves the thread back. The runtime the thread spends in
// the cgroup starting the command (exec.Cmd's set-up and the fork, tens
// to hundreds of microseconds) is charged to the cgroup by the kernel and
// by the BPF accounting alike; it is measured (startCharge) and taken
// out of both, so the command's figure is its own. A thread that cannot be
// moved back is never handed back to the Go scheduler: its goroutine
// returns still locked, which ends the thread.
//
// The thread names itself "0" in the tasks files rather than by its id:
// the kernel then moves the writing thread without taking the cgroup
// threadgroup lock for writing, whose first taking after a quiet spell
// waits an RCU grace period (11 ms of each measure's first run on the
// test VM, under strace).
func (p *Placement) startFromThread(start func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		const self = "0"
		home, err := cgroupIn("/proc/thread-self/cgroup", p.Kind)
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("this thread's cgroup: %w", err)
			return
		}
		if err := os.WriteFile(filepath.Join(p.Dir, "tasks"), []byte(self), 0); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("move the starting thread into cgroup %s: %w", p.Dir, err)
			return
		}
		t0 := threadCPU()
		serr := start()
		p.startCharge = threadCPU() - t0
		if err := os.WriteFile(filepath.Join(p.mount, home, "tasks"), []byte(self), 0); err != nil {
			// Stays locked: the thread, still in the command's cgroup,
			// ends with this goroutine, and measure goes on without it.
			// The command started all the same.
			done <- serr
			return
		}
		runtime.UnlockOSThread()
		done <- serr
	}()
	return <-done
}

func envOrSelf(env []string) []string {
	if env == nil {
		return os.Environ()
	}
	return env
}

// ids are the cgroup and its descendants' ids (a command may make its own
// sub-cgroups).
func (p *Placement) ids() map[uint64]bool {
	out := map[uint64]bool{p.id: true}
	_ = filepath.WalkDir(p.Dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() || path == p.Dir {
			return nil
		}
		if id, err := inode(path); err == nil {
			out[id] = true
		}
		return nil
	})
	return out
}

// KernelCPU is the kernel's own accounting of the cgroup and its
// descendants (cpuacct.usage on v1, cpu.stat usage_usec on cgroup2), in
// seconds; ok is false where the hierarchy keeps none (v1 cpu).
func (p *Placement) KernelCPU() (secs float64, ok bool) {
	switch p.Kind {
	case cgroup.CPUAcct:
		b, err := os.ReadFile(filepath.Join(p.Dir, "cpuacct.usage"))
		if err != nil {
			return 0, false
		}
		ns, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0, false
		}
		return float64(ns) / 1e9, true
	case cgroup.V2:
		b, err := os.ReadFile(filepath.Join(p.Dir, "cpu.stat"))
		if err != nil {
			return 0, false
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, found := strings.CutPrefix(line, "usage_usec "); found {
				us, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return 0, false
				}
				return float64(us) / 1e6, true
			}
		}
	}
	return 0, false
}

// Remove removes the cgroup and its descendants when we made them. Tasks
// the command left running keep it alive; that is reported, not killed.
func (p *Placement) Remove() error {
	if !p.made {
		return nil
	}
	var dirs []string
	_ = filepath.WalkDir(p.Dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	return removeTree(dirs)
}

// removeTree removes cgroup directories, deepest first; a cgroup kept
// busy is named with the processes that keep it.
func removeTree(dirs []string) error {
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
			if errors.Is(err, syscall.EBUSY) {
				if procs := procsIn(dirs[i]); len(procs) > 0 {
					err = fmt.Errorf("%w: %s still in it (the next measure removes the cgroup once it is empty)", err, strings.Join(procs, ", "))
				}
			}
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}

// procsIn names the processes in a cgroup: "PID (comm)".
func procsIn(dir string) []string {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil
	}
	var out []string
	for _, f := range strings.Fields(string(b)) {
		comm, _ := os.ReadFile(filepath.Join("/proc", f, "comm"))
		out = append(out, fmt.Sprintf("%s (%s)", f, strings.TrimSpace(string(comm))))
	}
	return out
}

// sweepStale removes the cgroups earlier measures left under parent (a
// command's background process kept them busy): those whose measure is
// gone and which are now empty. One still kept busy is named, with its
// processes, in the returned warnings. A live measure's cgroups (its PID
// is in their name) are never touched.
func sweepStale(parent string) []string {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return nil
	}
	var warns []string
	for _, ent := range entries {
		rest, ok := strings.CutPrefix(ent.Name(), "wattrace-measure-")
		if !ok || !ent.IsDir() {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
			continue // that measure still runs (or its PID was reused: leave it)
		}
		dir := filepath.Join(parent, ent.Name())
		var dirs []string
		_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		if err := removeTree(dirs); err != nil {
			warns = append(warns, fmt.Sprintf("a cgroup an earlier measure (PID %d, gone) left is still busy: %v", pid, err))
		}
	}
	return warns
}
