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
	"strconv"
	"strings"
	"syscall"

	"github.com/wattrace/wattrace/pkg/cgroup"
)

// The helper: on cgroup v1 (and the v1 key of hybrid hosts) clone3's
// CLONE_INTO_CGROUP is not available (it takes cgroup2 directories only),
// so the command is started as this binary again, as Helper: it says it
// is ready on fd 4 and waits on fd 3. Meanwhile measure moves it into the
// cgroup and takes the run's first reading; then it lets the helper exec
// the command. So the command and everything it spawns run in the cgroup
// from their first instruction, and the helper's own start-up (the Go
// runtime's) stays out of both our figure and the kernel's: it ran before
// the move and was claimed by the first reading.
const (
	// helperHold makes Helper wait for measure before it execs.
	helperHold = "WATTRACE_MEASURE_HOLD"
	// helperReport asks the helper to write its own cgroup path in the
	// hierarchy named by the value to fd 3 (systemd scopes: systemd-run
	// has already placed it).
	helperReport = "WATTRACE_MEASURE_REPORT"
)

// IsHelper reports whether this process was started as measure's helper;
// main (and test binaries) call Helper then, before anything else.
func IsHelper() bool {
	return os.Getenv(helperHold) != "" || os.Getenv(helperReport) != ""
}

// Helper waits for measure or reports its cgroup, as the environment
// says, and execs argv; it returns only when that fails, with the status
// to exit with.
func Helper(argv []string) int {
	hold, report := os.Getenv(helperHold), os.Getenv(helperReport)
	// The command and its children must not act as helpers.
	_ = os.Unsetenv(helperHold)
	_ = os.Unsetenv(helperReport)
	if len(argv) > 0 && argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		fmt.Fprintln(os.Stderr, "wattrace measure: helper started without a command")
		return ExitSetup
	}
	if hold != "" {
		wait, ready := os.NewFile(3, "go"), os.NewFile(4, "ready")
		_, err := ready.Write([]byte{1})
		_ = ready.Close()
		var b [1]byte
		if err == nil {
			_, err = wait.Read(b[:])
		}
		_ = wait.Close()
		if err != nil {
			// measure is gone or gave up: run nothing.
			return ExitSetup
		}
	}
	if report != "" {
		f := os.NewFile(3, "report")
		path, err := ownCgroup(os.Getpid(), cgroup.Kind(report))
		if err == nil {
			_, err = f.WriteString(path)
		}
		_ = f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "wattrace measure: report cgroup: %v\n", err)
			return ExitSetup
		}
	}
	err := syscall.Exec(argv[0], argv, os.Environ())
	fmt.Fprintf(os.Stderr, "wattrace measure: %s: %v\n", argv[0], err)
	if errors.Is(err, syscall.ENOENT) {
		return ExitNotFound
	}
	return ExitNotExecutable
}

// ownCgroup reads pid's cgroup path in hierarchy k from /proc.
func ownCgroup(pid int, k cgroup.Kind) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
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
	return "", fmt.Errorf("no %s line in /proc/%d/cgroup", k, pid)
}

// Placement is the command's own cgroup in the key hierarchy.
type Placement struct {
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
	argv := append([]string{cmd.Path}, cmd.Args[1:]...)
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
		if err != nil || len(b) == 0 {
			return fmt.Errorf("systemd scope %s: the helper reported no cgroup (%v)", p.scope, err)
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

// hooks are what runOnce calls around the command's start: started once
// cmd.Start returned (the helper is then waiting, in the cgroup), release
// after the run's first reading (the helper execs the command). Both
// always run, release even when started failed.
type hooks struct {
	started, release func() error
	// held: the command waits for release, so the run's first reading
	// is taken after started rather than before the start.
	held bool
}

// prepare sets cmd up to start in the placement; self is this binary,
// helperArgs the arguments that make it Helper.
func (p *Placement) prepare(cmd *exec.Cmd, self string, helperArgs []string) (hooks, error) {
	nop := func() error { return nil }
	if p.How == PlaceSystemd {
		started, err := p.prepareScope(cmd, self, helperArgs)
		return hooks{started, nop, false}, err
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
		return hooks{f.Close, nop, false}, nil
	}
	goR, goW, err := os.Pipe()
	if err != nil {
		return hooks{}, err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		goR.Close()
		goW.Close()
		return hooks{}, err
	}
	argv := append([]string{cmd.Path}, cmd.Args[1:]...)
	cmd.Path = self
	cmd.Args = append(append([]string{self}, helperArgs...), append([]string{"--"}, argv...)...)
	cmd.Env = append(envOrSelf(cmd.Env), helperHold+"=1")
	cmd.ExtraFiles = append(cmd.ExtraFiles, goR, readyW) // fds 3 and 4
	started := func() error {
		_ = goR.Close()
		_ = readyW.Close()
		defer readyR.Close()
		var b [1]byte
		if _, err := readyR.Read(b[:]); err != nil {
			return fmt.Errorf("cgroup helper did not start: %w", err)
		}
		pid := strconv.Itoa(cmd.Process.Pid)
		if err := os.WriteFile(filepath.Join(p.Dir, "cgroup.procs"), []byte(pid), 0); err != nil {
			return fmt.Errorf("move the command into cgroup %s: %w", p.Dir, err)
		}
		return nil
	}
	release := func() error {
		defer goW.Close()
		_, err := goW.Write([]byte{1})
		return err
	}
	return hooks{started, release, true}, nil
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
	var errs []error
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Rmdir(dirs[i]); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", dirs[i], err))
		}
	}
	return errors.Join(errs...)
}
