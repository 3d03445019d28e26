// Command footprint measures what wattrace costs beside node_exporter on one
// machine in one run: CPU, scrape latency (sequential and 4 in parallel),
// memory and series, with N Slurm-like cgroups of M processes each. The two
// exporters run one at a time, in interleaved rounds, against the same
// workload; the figures are the medians over rounds. It needs root (it makes
// cgroups and loads BPF) and fetches Debian's node_exporter package when no
// node_exporter is on PATH. It removes everything it starts.
//
//	go run ./scripts/footprint -rounds 3 -duration 2m
package main

import (
	"context"
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
	busyEvery      time.Duration
	workload       string // the workload's top cgroup name, once made
}

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
	flag.StringVar(&o.baseline, "baseline", "", "a wattrace binary built from another commit, measured beside the others as wattrace-baseline (before/after in one run)")
	flag.StringVar(&o.dump, "dump", "", "directory to write each exporter's last scrape to (<name>.prom), for a look at its series")
	flag.Parse()
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
	wattrace := filepath.Join(tmp, "wattrace")
	if out, err := exec.Command("go", "build", "-o", wattrace, "./cmd/exporter").CombinedOutput(); err != nil {
		return fmt.Errorf("build wattrace: %v\n%s", err, out)
	}
	nodeExporter, err := findNodeExporter(tmp)
	if err != nil {
		return err
	}
	w, err := startWorkload(o)
	defer w.stop()
	if err != nil {
		return err
	}
	fmt.Printf("workload: %d cgroups × %d processes under %s\n", o.cgroups, o.procs, w.name)
	o.workload = w.name

	targets := map[string][]string{
		"node_exporter": {nodeExporter, "--web.listen-address=127.0.0.1:%d"},
		"wattrace":      append([]string{wattrace, "--web.listen-address=127.0.0.1:%d"}, strings.Fields(o.wattraceArgs)...),
	}
	results := map[string][]result{}
	order := []string{"node_exporter", "wattrace"}
	if o.baseline != "" {
		targets["wattrace-baseline"] = append([]string{o.baseline, "--web.listen-address=127.0.0.1:%d"}, strings.Fields(o.wattraceArgs)...)
		order = []string{"node_exporter", "wattrace-baseline", "wattrace"}
	}
	for round := 0; round < o.rounds; round++ {
		for _, name := range order {
			r, err := measure(ctx, o, name, targets[name])
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round+1, name, err)
			}
			fmt.Printf("round %d %-13s cpu %.3f%%  spaced p50 %v  seq p50 %v  par p50 %v  rss %.1f/%.1f MiB  hwm %.1f MiB  series %d\n",
				round+1, name, r.cpuPct, r.spacedP50.Round(100*time.Microsecond), r.seqP50.Round(100*time.Microsecond), r.parP50.Round(100*time.Microsecond),
				r.rssWarm, r.rssEnd, r.hwm, r.series)
			results[name] = append(results[name], r)
		}
		slices.Reverse(order) // interleave: ABBA
	}
	report(results)
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
	name  string
	fifo  string
	dirs  []string // every cgroup made, parents first
	procs []*exec.Cmd
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
	if len(hier) == 0 {
		hier = []string{o.cgroupRoot} // pure v2
	}
	for i := 0; i < o.cgroups; i++ {
		rel := filepath.Join(w.name, "slurm", "uid_1000", fmt.Sprintf("job_%d", 1000+i), "step_batch")
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
			}
			leaves = append(leaves, filepath.Join(h, rel))
		}
		// The shell moves itself into every hierarchy's leaf, then execs.
		script := `for d in "$@"; do echo $$ > "$d/cgroup.procs" || exit 1; done; exec sleep 86400`
		for p := 0; p < o.procs; p++ {
			cmd := exec.Command("/bin/sh", append([]string{"-c", script, "sh"}, leaves...)...)
			if p == 0 && o.busyEvery > 0 {
				busy := fmt.Sprintf(`for d in "$@"; do echo $$ > "$d/cgroup.procs" || exit 1; done; `+
					`while :; do for ((i=0;i<1000;i++)); do :; done; read -t %d <> %s; done`, int(o.busyEvery.Seconds()), fifo)
				cmd = exec.Command("/bin/bash", append([]string{"-c", busy, "bash"}, leaves...)...)
			}
			if err := cmd.Start(); err != nil {
				return w, err
			}
			w.procs = append(w.procs, cmd)
		}
	}
	return w, nil
}

func (w *workload) stop() {
	if w.fifo != "" {
		defer os.Remove(w.fifo)
	}
	for _, p := range w.procs {
		p.Process.Kill()
		p.Wait()
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
func measure(ctx context.Context, o options, name string, argv []string) (result, error) {
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
		if err := sleep(ctx, min(o.interval, time.Until(end))); err != nil {
			return r, err
		}
	}
	wall := time.Since(t0).Seconds()
	r.cpuPct = float64(cpuTicks(cmd.Process.Pid)-c0) / 100 / wall * 100
	r.spacedP50 = median(spaced)
	r.series, r.scrapeBytes = countSeries(body), len(body)
	r.foreign = countForeign(body, o.workload)
	if o.dump != "" {
		if err := os.WriteFile(filepath.Join(o.dump, name+".prom"), body, 0o644); err != nil {
			return r, err
		}
	}

	var seq, par []time.Duration
	for i := 0; i < o.burst; i++ {
		_, d, err := scrape(client, url)
		if err != nil {
			return r, err
		}
		seq = append(seq, d)
	}
	for i := 0; i < o.burst; i++ {
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
			return r, ferr
		}
	}
	r.seqP50, r.parP50 = median(seq), median(par)
	r.rssEnd, r.hwm = status(cmd.Process.Pid, "VmRSS"), status(cmd.Process.Pid, "VmHWM")
	return r, nil
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
		{"RSS after warm-up (MiB)", func(r result) float64 { return r.rssWarm }, "%.1f"},
		{"of which anonymous (MiB)", func(r result) float64 { return r.anonWarm }, "%.1f"},
		{"RSS at the end (MiB)", func(r result) float64 { return r.rssEnd }, "%.1f"},
		{"VmHWM (MiB)", func(r result) float64 { return r.hwm }, "%.1f"},
		{"series", func(r result) float64 { return float64(r.series) }, "%.0f"},
		{"series, other tests' cgroups left out", func(r result) float64 { return float64(r.series - r.foreign) }, "%.0f"},
		{"scrape size (kB)", func(r result) float64 { return float64(r.scrapeBytes) / 1000 }, "%.0f"},
	}
	fmt.Println()
	_, baseline := results["wattrace-baseline"]
	if baseline {
		fmt.Println("| figure (median) | node_exporter | wattrace-baseline | ratio | wattrace | ratio |")
		fmt.Println("|---|---|---|---|---|---|")
	} else {
		fmt.Println("| figure (median) | node_exporter | wattrace | ratio |")
		fmt.Println("|---|---|---|---|")
	}
	for _, row := range rows {
		a := pick("node_exporter", row.f)
		ratio := func(b float64) string {
			if a > 0 {
				return fmt.Sprintf("%.2f×", b/a)
			}
			return "—"
		}
		fmt.Printf("| %s | "+row.unit, row.label, a)
		if baseline {
			b := pick("wattrace-baseline", row.f)
			fmt.Printf(" | "+row.unit+" | %s", b, ratio(b))
		}
		b := pick("wattrace", row.f)
		fmt.Printf(" | "+row.unit+" | %s |\n", b, ratio(b))
	}
}
