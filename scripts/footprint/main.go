// Command footprint measures what wattrace costs beside node_exporter on one
// machine in one run: CPU, scrape latency (sequential, 4 in parallel, and
// scrapes that step and render themselves), memory and series, with N
// Slurm-like cgroups of M processes each (of T threads each with -threads).
// The exporters run one at a time, in interleaved rounds, against the same
// workload; the figures are the medians over rounds. It needs root (it makes
// cgroups and loads BPF) and fetches Debian's node_exporter package when no
// node_exporter is on PATH. It removes everything it starts.
//
//	go run ./scripts/footprint -rounds 3 -duration 2m
//
// With -churn R it also starts R short-lived processes a second in the jobs
// for the CPU window, samples wattrace's RSS at every scrape and fails
// unless it stays flat. scripts/cost-figures.sh runs the set of runs behind
// docs/performance.md's cost figures in one command.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// hierarchies a Slurm job's processes are placed in on a hybrid host (the
// task/cgroup plugin's v1 layout), plus the v2 tree when mounted.
var hierarchies = []string{"cpuacct", "cpu", "memory", "pids", "blkio", "unified"}

type options struct {
	cgroups, procs int
	interval       time.Duration
	duration       time.Duration
	warmup         time.Duration
	rounds         int
	burst          int
	cgroupRoot     string
	wattraceArgs   string
	dump           string
	stress         time.Duration
	baseline       string
	wattrace       string
	helper         string // the compiled sleepers.c
	busyEvery      time.Duration
	workload       string // the workload's top cgroup name, once made
	threads        int    // threads per process (sleepers.c) when > 1
	cold           int    // scrapes at irregular gaps after the window
	nodeExporter   bool
	churn          int // short-lived processes a second during the window
	churnChild     string
	layout         string // slurm or plain
}

//go:embed sleepers.c.txt
var sleepersC []byte

type result struct {
	cpuPct          float64
	seqP50, parP50  time.Duration
	spacedP50       time.Duration // the CPU window's scrapes, -interval apart
	rssWarm, rssEnd float64       // MiB
	anonWarm        float64       // MiB: RssAnon after warm-up (the rest is the binary's pages)
	hwm             float64       // MiB
	series          int
	foreign         int // series of other tests' cgroups (a shared machine)
	scrapeBytes     int
	target          string
	coldP50         time.Duration // scrapes that step and render themselves
	load            float64       // 1-minute load average, median of the exporter's measurement
	rss1m, rssMax   float64       // MiB: RSS a minute into the window, and its largest sample
	started         int           // short-lived processes started in the window (-churn)
}

func main() {
	var o options
	flag.IntVar(&o.cgroups, "cgroups", 200, "Slurm-like job cgroups")
	flag.IntVar(&o.procs, "procs", 5, "processes per cgroup")
	flag.DurationVar(&o.interval, "interval", 15*time.Second, "scrape interval during the CPU window")
	flag.DurationVar(&o.duration, "duration", 2*time.Minute, "CPU window per exporter and round")
	flag.DurationVar(&o.warmup, "warmup", 20*time.Second, "wait after start before measuring")
	flag.IntVar(&o.rounds, "rounds", 3, "interleaved rounds")
	flag.IntVar(&o.burst, "burst", 20, "scrapes for each latency figure")
	flag.StringVar(&o.cgroupRoot, "cgroupfs", "/sys/fs/cgroup", "cgroup file system")
	flag.StringVar(&o.wattraceArgs, "wattrace.args", "", "extra wattrace flags, space separated")
	flag.DurationVar(&o.stress, "stress", 0, "run stress-ng --cpu 2 for this long at the start of each CPU window (0: a quiet window)")
	flag.DurationVar(&o.busyEvery, "busy-every", 10*time.Second, "one process per job runs a short busy loop (about 1 ms) this often, so every job has energy and grams; 0: all processes only sleep")
	flag.StringVar(&o.wattrace, "wattrace", "", "the wattrace binary to measure (default: built from this checkout with go build; a machine without Go takes one built elsewhere)")
	flag.StringVar(&o.baseline, "baseline", "", "a wattrace binary built from another commit, measured beside the others as wattrace-baseline (before/after in one run)")
	flag.StringVar(&o.dump, "dump", "", "directory to write each exporter's last scrape to (<name>.prom), for a look at its series")
	flag.IntVar(&o.threads, "threads", 1, "threads per process: above 1 each process is a C program of that many sleeping threads (compiled with cc), as a Java or OpenMP host's")
	flag.IntVar(&o.cold, "cold", 0, "after the CPU window, this many scrapes at irregular gaps longer than wattrace's stats.interval, each of which steps the loop and renders a new snapshot itself (cold p50)")
	flag.BoolVar(&o.nodeExporter, "node-exporter", true, "measure node_exporter too (the ratios need it)")
	flag.IntVar(&o.churn, "churn", 0, "short-lived processes started per second in the jobs during the CPU window; wattrace's RSS is sampled at every scrape and must stay flat (the run fails otherwise)")
	flag.StringVar(&o.churnChild, "churn-child", "", "internal: run as a churner, RATE:DURATION")
	flag.StringVar(&o.layout, "layout", "slurm", "the cgroups' names: slurm (…/slurm/uid_1000/job_<i>/step_batch: Slurm jobs, each a workload with its series and memory files) or plain (…/cg-<i>: cgroups of no workload, as BenchmarkScale's)")
	flag.Parse()
	if o.churnChild != "" {
		if err := churner(o.churnChild); err != nil {
			fmt.Fprintln(os.Stderr, "footprint churner:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "footprint:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root: it creates cgroups and wattrace loads BPF")
	}
	tmp, err := os.MkdirTemp("", "footprint-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	wattrace := o.wattrace
	if wattrace == "" {
		wattrace = filepath.Join(tmp, "wattrace")
		if out, err := exec.Command("go", "build", "-o", wattrace, "./cmd/exporter").CombinedOutput(); err != nil {
			return fmt.Errorf("build wattrace: %v\n%s", err, out)
		}
	}
	targets := map[string][]string{
		"wattrace": append([]string{wattrace, "--web.listen-address=127.0.0.1:%d"}, strings.Fields(o.wattraceArgs)...),
	}
	var order []string
	if o.nodeExporter {
		nodeExporter, err := findNodeExporter(tmp)
		if err != nil {
			return err
		}
		targets["node_exporter"] = []string{nodeExporter, "--web.listen-address=127.0.0.1:%d"}
		order = append(order, "node_exporter")
	}
	if o.baseline != "" {
		targets["wattrace-baseline"] = append([]string{o.baseline, "--web.listen-address=127.0.0.1:%d"}, strings.Fields(o.wattraceArgs)...)
		order = append(order, "wattrace-baseline")
	}
	order = append(order, "wattrace")
	if o.threads > 1 {
		if o.helper, err = buildSleepers(tmp); err != nil {
			return err
		}
		restore, err := roomForTasks(o.cgroups * o.procs * o.threads)
		if err != nil {
			return err
		}
		defer restore()
	}
	t0 := time.Now()
	w, err := startWorkload(o)
	defer w.stop()
	if err != nil {
		return err
	}
	if err := w.waitStarted(o, 5*time.Minute); err != nil {
		return err
	}
	fmt.Printf("workload: %d cgroups × %d processes × %d threads under %s (started in %v); %d tasks on the node\n",
		o.cgroups, o.procs, o.threads, w.name, time.Since(t0).Round(time.Second), nodeTasks())
	o.workload = w.name
	results := map[string][]result{}
	var churnErr error
	for round := 0; round < o.rounds; round++ {
		for _, name := range order {
			r, err := measure(ctx, o, w, name, targets[name])
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, name, err)
			}
			fmt.Printf("round %d %-13s cpu %.3f%%  spaced p50 %v  seq p50 %v  par p50 %v  cold p50 %v  rss %.1f/%.1f MiB  hwm %.1f MiB  series %d  load %.1f\n",
				round+1, name, r.cpuPct, r.spacedP50.Round(100*time.Microsecond), r.seqP50.Round(100*time.Microsecond), r.parP50.Round(100*time.Microsecond),
				r.coldP50.Round(100*time.Microsecond), r.rssWarm, r.rssEnd, r.hwm, r.series, r.load)
			if o.churn > 0 && name != "node_exporter" {
				fmt.Printf("round %d %-13s churn: %d processes started (%.0f/s); RSS a minute in %.1f MiB, largest %.1f, at the end %.1f\n",
					round+1, name, r.started, float64(r.started)/o.duration.Seconds(), r.rss1m, r.rssMax, r.rssEnd)
				if err := flat(r); err != nil {
					churnErr = errors.Join(churnErr, fmt.Errorf("round %d, %s: %w", round+1, name, err))
				}
			}
			results[name] = append(results[name], r)
		}
		slices.Reverse(order) // interleave: ABBA
	}
	report(results)
	return churnErr
}

// flat checks that RSS did not grow under churn: its largest sample from a
// minute into the window on stays within 10% (and 2 MiB) of the sample a
// minute in, so no per-exit state accumulates.
func flat(r result) error {
	if r.rss1m == 0 {
		return errors.New("no RSS sample a minute into the window: -duration must be over a minute with -churn")
	}
	if r.rssMax > max(1.1*r.rss1m, r.rss1m+2) {
		return fmt.Errorf("RSS grew under churn: %.1f MiB a minute in, %.1f MiB at most later", r.rss1m, r.rssMax)
	}
	return nil
}

// findNodeExporter returns node_exporter from PATH, or unpacks Debian's
// package into dir (apt-get download: nothing is installed or started).
func findNodeExporter(dir string) (string, error) {
	if p, err := exec.LookPath("node_exporter"); err == nil {
		return p, nil
	}
	if p, err := exec.LookPath("prometheus-node-exporter"); err == nil {
		return p, nil
	}
	dl := exec.Command("apt-get", "download", "prometheus-node-exporter")
	dl.Dir = dir
	if _, err := dl.CombinedOutput(); err != nil {
		// The package lists may be missing on a fresh machine.
		if out2, err2 := exec.Command("apt-get", "update", "-qq").CombinedOutput(); err2 != nil {
			return "", fmt.Errorf("apt-get update: %v\n%s", err2, out2)
		}
		dl = exec.Command("apt-get", "download", "prometheus-node-exporter")
		dl.Dir = dir
		if out, err := dl.CombinedOutput(); err != nil {
			return "", fmt.Errorf("apt-get download prometheus-node-exporter: %v\n%s", err, out)
		}
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "prometheus-node-exporter_*.deb"))
	if len(debs) == 0 {
		return "", errors.New("no prometheus-node-exporter .deb downloaded")
	}
	root := filepath.Join(dir, "node-exporter")
	if out, err := exec.Command("dpkg", "-x", debs[0], root).CombinedOutput(); err != nil {
		return "", fmt.Errorf("dpkg -x: %v\n%s", err, out)
	}
	return filepath.Join(root, "usr/bin/prometheus-node-exporter"), nil
}

type workload struct {
	name   string
	fifo   string
	dirs   []string // every cgroup made, parents first
	leaves [][]string
	procs  []*exec.Cmd
}

// startWorkload makes /<name>/slurm/uid_1000/job_<i>/step_batch in every
// hierarchy and starts the processes in them.
func startWorkload(o options) (*workload, error) {
	w := &workload{name: fmt.Sprintf("wattrace-footprint-%08x", rand.Uint32())}
	// The busy process waits on a FIFO nobody writes (read -t, a bash
	// builtin), so it forks nothing: no process churn.
	fifo := filepath.Join(os.TempDir(), w.name+".fifo")
	if o.busyEvery > 0 {
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			return w, err
		}
		w.fifo = fifo
	}
	var hier []string
	for _, h := range hierarchies {
		if _, err := os.Stat(filepath.Join(o.cgroupRoot, h, "cgroup.procs")); err == nil {
			hier = append(hier, filepath.Join(o.cgroupRoot, h))
		}
	}
	pureV2 := len(hier) == 0
	if pureV2 {
		hier = []string{o.cgroupRoot}
	}
	for i := 0; i < o.cgroups; i++ {
		rel := filepath.Join(w.name, "slurm", "uid_1000", fmt.Sprintf("job_%d", 1000+i), "step_batch")
		if o.layout == "plain" {
			rel = filepath.Join(w.name, fmt.Sprintf("cg-%04d", i))
		}
		var leaves []string
		for _, h := range hier {
			parts := strings.Split(rel, "/")
			for j := range parts {
				d := filepath.Join(append([]string{h}, parts[:j+1]...)...)
				if err := os.Mkdir(d, 0o755); err == nil {
					w.dirs = append(w.dirs, d)
				} else if !errors.Is(err, os.ErrExist) {
					return w, err
				}
				if pureV2 && j < len(parts)-1 {
					delegate(d)
				}
			}
			leaves = append(leaves, filepath.Join(h, rel))
		}
		w.leaves = append(w.leaves, leaves)
		// One shell per job moves itself into every hierarchy's leaf and
		// starts the job's processes, which are born there: one move per
		// job, not per process (at 10,000 processes, a move each in six
		// hierarchies held the cgroup lock for a minute, load 300).
		sleeper := "sleep 86400"
		if o.threads > 1 {
			sleeper = fmt.Sprintf("%s %d", o.helper, o.threads)
		}
		script := `for d in "$@"; do echo $$ > "$d/cgroup.procs" || exit 1; done; `
		n := o.procs
		if o.busyEvery > 0 {
			// One process per job does a little work now and then.
			script += fmt.Sprintf(`/bin/bash -c 'while :; do for ((i=0;i<1000;i++)); do :; done; read -t %d <> %s; done' & `,
				int(o.busyEvery.Seconds()), fifo)
			n--
		}
		if n > 0 {
			script += fmt.Sprintf(`i=1; while [ $i -lt %d ]; do %s & i=$((i+1)); done; exec %s`, n, sleeper, sleeper)
		} else {
			script += "wait"
		}
		cmd := exec.Command("/bin/sh", append([]string{"-c", script, "sh"}, leaves...)...)
		if err := cmd.Start(); err != nil {
			return w, err
		}
		w.procs = append(w.procs, cmd)
	}
	return w, nil
}

// delegate enables, below d on a cgroup v2 host, the controllers a Slurm
// job's cgroup has there (memory, io, pids, cpu, those d has), so that
// the jobs have the memory files wattrace reads, as on a hybrid host.
func delegate(d string) {
	b, err := os.ReadFile(filepath.Join(d, "cgroup.controllers"))
	if err != nil {
		return
	}
	var enable []string
	for _, c := range strings.Fields(string(b)) {
		switch c {
		case "memory", "io", "pids", "cpu":
			enable = append(enable, "+"+c)
		}
	}
	if len(enable) > 0 {
		// Best effort: without them the jobs have fewer files to read.
		_ = os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0o644)
	}
}

// waitStarted waits until every process (and thread) of the workload is in
// its leaf: thousands take a while to start on a small machine.
func (w *workload) waitStarted(o options, timeout time.Duration) error {
	want := o.procs * o.threads
	if o.busyEvery > 0 {
		want -= o.threads - 1 // the busy process is a shell, one thread
	}
	for deadline := time.Now().Add(timeout); ; time.Sleep(500 * time.Millisecond) {
		n := 0
		for _, l := range w.leaves {
			// The first leaf is the key hierarchy's on a v1 host (cpuacct)
			// and the v2 leaf on a v2 host; "tasks" lists threads (v1),
			// cgroup.threads on v2.
			for _, f := range []string{"tasks", "cgroup.threads"} {
				if b, err := os.ReadFile(filepath.Join(l[0], f)); err == nil {
					n += min(len(strings.Fields(string(b))), want)
					break
				}
			}
		}
		if n >= want*len(w.leaves) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d tasks started", n, want*len(w.leaves))
		}
	}
}

// buildSleepers compiles sleepers.c.txt (C; named so that go build leaves it alone) into dir.
func buildSleepers(dir string) (string, error) {
	src, bin := filepath.Join(dir, "sleepers.c"), filepath.Join(dir, "sleepers")
	if err := os.WriteFile(src, sleepersC, 0o644); err != nil {
		return "", err
	}
	if out, err := exec.Command("cc", "-O2", "-pthread", "-o", bin, src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("cc sleepers.c (-threads needs a C compiler: apt-get install gcc): %v\n%s", err, out)
	}
	return bin, nil
}

// roomForTasks raises kernel.pid_max when the node's tasks and n more would
// not fit in it (32768 by default on small machines; every thread takes a
// PID), and returns what restores it.
func roomForTasks(n int) (func(), error) {
	const path = "/proc/sys/kernel/pid_max"
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	old := strings.TrimSpace(string(b))
	cur, err := strconv.Atoi(old)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	need := nodeTasks() + n + 10000
	if need <= cur {
		return func() {}, nil
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(need)), 0o644); err != nil {
		return nil, fmt.Errorf("raise %s to %d for %d threads: %w", path, need, n, err)
	}
	fmt.Printf("kernel.pid_max raised from %s to %d for the run\n", old, need)
	return func() {
		if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "footprint: restore %s to %s: %v\n", path, old, err)
		}
	}, nil
}

// nodeTasks counts every thread of every process on the node.
func nodeTasks() int {
	procs, _ := os.ReadDir("/proc")
	n := 0
	for _, p := range procs {
		if p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		if tasks, err := os.ReadDir(filepath.Join("/proc", p.Name(), "task")); err == nil {
			n += len(tasks)
		}
	}
	return n
}

// startChurn starts the churners for a window: ten, one per job of the
// first ten (each its own process moved into its job's leaves, so that
// what it starts is born there), each starting rate/10 short processes a
// second. It returns what waits for them and counts what they started.
func startChurn(ctx context.Context, w *workload, rate int, window time.Duration) (func() int, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	n := min(10, len(w.leaves))
	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for i := 0; i < n; i++ {
		script := `for d in "$@"; do echo $$ > "$d/cgroup.procs" || exit 1; done; exec "$0" -churn-child ` +
			fmt.Sprintf("%d:%s", rate/n, window)
		cmd := exec.CommandContext(ctx, "/bin/sh", append([]string{"-c", script, self}, w.leaves[i]...)...)
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	return func() int {
		total := 0
		for i, c := range cmds {
			_ = c.Wait()
			v, _ := strconv.Atoi(strings.TrimSpace(outs[i].String()))
			total += v
		}
		return total
	}, nil
}

// churner starts RATE short-lived processes (/bin/true) a second for
// DURATION, in its own cgroups, and prints how many it started.
func churner(spec string) error {
	r, d, ok := strings.Cut(spec, ":")
	rate, err := strconv.Atoi(r)
	if !ok || err != nil || rate <= 0 {
		return fmt.Errorf("bad -churn-child %q", spec)
	}
	dur, err := time.ParseDuration(d)
	if err != nil {
		return err
	}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	started := 0
	for end := time.Now().Add(dur); time.Now().Before(end); <-tick.C {
		cmd := exec.Command("/bin/true")
		if err := cmd.Start(); err != nil {
			continue
		}
		started++
		wg.Add(1)
		go func() { defer wg.Done(); _ = cmd.Wait() }()
	}
	wg.Wait()
	fmt.Println(started)
	return nil
}

func (w *workload) stop() {
	if w.fifo != "" {
		defer os.Remove(w.fifo)
	}
	for _, p := range w.procs {
		p.Process.Kill()
		p.Wait()
	}
	// The jobs' other processes are the shells' children: killed from
	// their leaves until none is left.
	for _, l := range w.leaves {
		for try := 0; try < 50; try++ {
			b, _ := os.ReadFile(filepath.Join(l[0], "cgroup.procs"))
			pids := strings.Fields(string(b))
			if len(pids) == 0 {
				break
			}
			for _, f := range pids {
				if pid, err := strconv.Atoi(f); err == nil {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for i := len(w.dirs) - 1; i >= 0; i-- {
		for try := 0; try < 50; try++ {
			if err := os.Remove(w.dirs[i]); err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// measure starts one exporter afresh, lets it warm up, then measures its
// CPU over a window of periodic scrapes, and its latency in bursts.
func measure(ctx context.Context, o options, w *workload, name string, argv []string) (result, error) {
	port, err := freePort()
	if err != nil {
		return result{}, err
	}
	args := slices.Clone(argv[1:])
	for i, a := range args {
		if strings.Contains(a, "%d") {
			args[i] = fmt.Sprintf(a, port)
		}
	}
	cmd := exec.CommandContext(ctx, argv[0], args...)
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}()
	url := fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
	client := &http.Client{Timeout: 30 * time.Second}
	if err := sleep(ctx, o.warmup); err != nil {
		return result{}, err
	}
	body, _, err := scrape(client, url)
	if err != nil {
		return result{}, fmt.Errorf("%w\n%s", err, logs.String())
	}
	r := result{target: name, rssWarm: status(cmd.Process.Pid, "VmRSS"), anonWarm: status(cmd.Process.Pid, "RssAnon")}
	loads := []float64{loadAvg()}
	var churned func() int
	if o.churn > 0 && name != "node_exporter" {
		if churned, err = startChurn(ctx, w, o.churn, o.duration); err != nil {
			return r, err
		}
	}
	if o.stress > 0 {
		s := exec.CommandContext(ctx, "stress-ng", "--cpu", "2", "--timeout", fmt.Sprintf("%ds", int(o.stress.Seconds())), "--quiet")
		if err := s.Start(); err != nil {
			return r, fmt.Errorf("stress-ng: %w", err)
		}
		defer s.Wait()
	}
	t0, c0 := time.Now(), cpuTicks(cmd.Process.Pid)
	var spaced []time.Duration
	first := true
	for end := t0.Add(o.duration); time.Now().Before(end); {
		var d time.Duration
		if body, d, err = scrape(client, url); err != nil {
			return r, err
		}
		if !first { // the first follows the warm-up scrape at once
			spaced = append(spaced, d)
		}
		first = false
		rss := status(cmd.Process.Pid, "VmRSS")
		if time.Since(t0) >= time.Minute {
			if r.rss1m == 0 {
				r.rss1m = rss
			}
			r.rssMax = max(r.rssMax, rss)
		}
		if err := sleep(ctx, min(o.interval, time.Until(end))); err != nil {
			return r, err
		}
	}
	wall := time.Since(t0).Seconds()
	r.cpuPct = float64(cpuTicks(cmd.Process.Pid)-c0) / 100 / wall * 100
	loads = append(loads, loadAvg())
	if churned != nil {
		r.started = churned()
	}
	r.spacedP50 = median(spaced)
	r.series, r.scrapeBytes = countSeries(body), len(body)
	r.foreign = countForeign(body, o.workload)
	if o.dump != "" {
		if err := os.WriteFile(filepath.Join(o.dump, name+".prom"), body, 0o644); err != nil {
			return r, err
		}
	}

	seq, par, err := bursts(client, url, o.burst)
	if err != nil {
		return r, err
	}
	r.seqP50, r.parP50 = median(seq), median(par)
	cold, err := coldScrapes(ctx, client, url, o.cold)
	if err != nil {
		return r, err
	}
	r.coldP50 = median(cold)
	loads = append(loads, loadAvg())
	r.load = median(loads)
	r.rssEnd, r.hwm = status(cmd.Process.Pid, "VmRSS"), status(cmd.Process.Pid, "VmHWM")
	return r, nil
}

// bursts times n scrapes one after the other, then n rounds of four at
// once.
func bursts(client *http.Client, url string, n int) (seq, par []time.Duration, err error) {
	for i := 0; i < n; i++ {
		_, d, err := scrape(client, url)
		if err != nil {
			return nil, nil, err
		}
		seq = append(seq, d)
	}
	for i := 0; i < n; i++ {
		var mu sync.Mutex
		var wg sync.WaitGroup
		var ferr error
		for j := 0; j < 4; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, d, err := scrape(client, url)
				mu.Lock()
				defer mu.Unlock()
				par = append(par, d)
				if err != nil {
					ferr = err
				}
			}()
		}
		wg.Wait()
		if ferr != nil {
			return nil, nil, ferr
		}
	}
	return seq, par, nil
}

// coldScrapes times n scrapes at irregular gaps, each longer than
// wattrace's default stats.interval (5 s) and none within 10% of the one
// before (the loop would learn a period and step ahead of it): each finds
// the snapshot too old and steps the loop and renders a new one itself.
func coldScrapes(ctx context.Context, client *http.Client, url string, n int) ([]time.Duration, error) {
	gaps := []float64{6.3, 8.1, 7.2, 9.4, 6.8, 10.1, 7.7, 8.9}
	var cold []time.Duration
	for i := 0; i < n; i++ {
		if err := sleep(ctx, time.Duration(gaps[i%len(gaps)]*float64(time.Second))); err != nil {
			return nil, err
		}
		_, d, err := scrape(client, url)
		if err != nil {
			return nil, err
		}
		cold = append(cold, d)
	}
	return cold, nil
}

// loadAvg is the node's 1-minute load average.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func scrape(c *http.Client, url string) ([]byte, time.Duration, error) {
	t := time.Now()
	resp, err := c.Get(url)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	d := time.Since(t)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return body, d, err
}

// countForeign counts the series of cgroups other tests on a shared
// machine made (named wattrace-*, not this run's workload): they come and
// go with those tests, and are left out of "series, this workload".
func countForeign(body []byte, own string) int {
	n := 0
	for _, l := range strings.Split(string(body), "\n") {
		i := strings.Index(l, `cgroup="`)
		if i < 0 || strings.HasPrefix(l, "#") {
			continue
		}
		cg, _, _ := strings.Cut(l[i+len(`cgroup="`):], `"`)
		if strings.Contains(cg, "/wattrace-") && !strings.Contains(cg, own) {
			n++
		}
	}
	return n
}

func countSeries(body []byte) int {
	n := 0
	for _, l := range strings.Split(string(body), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			n++
		}
	}
	return n
}

// cpuTicks is utime+stime of pid in USER_HZ (100) ticks.
func cpuTicks(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return u + st
}

// status returns a /proc/PID/status field in kB as MiB.
func status(pid int, field string) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, field+":") {
			f := strings.Fields(l)
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func median[T int | float64 | time.Duration](v []T) T {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func report(results map[string][]result) {
	pick := func(name string, f func(result) float64) float64 {
		var v []float64
		for _, r := range results[name] {
			v = append(v, f(r))
		}
		return median(v)
	}
	rows := []struct {
		label string
		f     func(result) float64
		unit  string
	}{
		{"CPU, % of one core", func(r result) float64 { return r.cpuPct }, "%.3f"},
		{"scrape p50, -interval apart (ms)", func(r result) float64 { return float64(r.spacedP50) / 1e6 }, "%.1f"},
		{"scrape p50, sequential (ms)", func(r result) float64 { return float64(r.seqP50) / 1e6 }, "%.1f"},
		{"scrape p50, 4 in parallel (ms)", func(r result) float64 { return float64(r.parP50) / 1e6 }, "%.1f"},
		{"scrape p50, self-stepping (-cold) (ms)", func(r result) float64 { return float64(r.coldP50) / 1e6 }, "%.1f"},
		{"RSS after warm-up (MiB)", func(r result) float64 { return r.rssWarm }, "%.1f"},
		{"of which anonymous (MiB)", func(r result) float64 { return r.anonWarm }, "%.1f"},
		{"RSS at the end (MiB)", func(r result) float64 { return r.rssEnd }, "%.1f"},
		{"VmHWM (MiB)", func(r result) float64 { return r.hwm }, "%.1f"},
		{"RSS a minute into the window (MiB)", func(r result) float64 { return r.rss1m }, "%.1f"},
		{"largest RSS from a minute into the window on (MiB)", func(r result) float64 { return r.rssMax }, "%.1f"},
		{"series", func(r result) float64 { return float64(r.series) }, "%.0f"},
		{"series, other tests' cgroups left out", func(r result) float64 { return float64(r.series - r.foreign) }, "%.0f"},
		{"scrape size (kB)", func(r result) float64 { return float64(r.scrapeBytes) / 1000 }, "%.0f"},
		{"load average (1 min) while measured", func(r result) float64 { return r.load }, "%.1f"},
	}
	// Columns: the exporters measured; ratios to node_exporter, or, without
	// it, the build to its baseline.
	var cols []string
	for _, n := range []string{"node_exporter", "wattrace-baseline", "wattrace"} {
		if _, ok := results[n]; ok {
			cols = append(cols, n)
		}
	}
	ref := ""
	switch {
	case results["node_exporter"] != nil:
		ref = "node_exporter"
	case results["wattrace-baseline"] != nil:
		ref = "wattrace-baseline"
	}
	fmt.Println()
	head, rule := "| figure (median) |", "|---|"
	for _, c := range cols {
		head += " " + c + " |"
		rule += "---|"
		if ref != "" && c != ref {
			head += " ÷ " + ref + " |"
			rule += "---|"
		}
	}
	fmt.Println(head)
	fmt.Println(rule)
	for _, row := range rows {
		line := "| " + row.label + " |"
		var a float64
		if ref != "" {
			a = pick(ref, row.f)
		}
		for _, c := range cols {
			b := pick(c, row.f)
			line += " " + fmt.Sprintf(row.unit, b) + " |"
			if ref != "" && c != ref {
				if a > 0 {
					line += fmt.Sprintf(" %.2f× |", b/a)
				} else {
					line += " — |"
				}
			}
		}
		fmt.Println(line)
	}
}
