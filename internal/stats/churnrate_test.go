package stats

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/bpfloader"
	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/reading"
)

// churnEnv makes the test binary a churner: RATE:DURATION starts RATE
// short-lived processes (/bin/true) a second for DURATION, in the
// churner's own cgroup, and prints how many it started.
const churnEnv = "WATTRACE_TEST_CHURN"

func init() {
	spec := os.Getenv(churnEnv)
	if spec == "" {
		return
	}
	r, d, _ := strings.Cut(spec, ":")
	rate, err1 := strconv.Atoi(r)
	dur, err2 := time.ParseDuration(d)
	if err1 != nil || err2 != nil || rate <= 0 {
		fmt.Fprintf(os.Stderr, "bad %s=%q\n", churnEnv, spec)
		os.Exit(2)
	}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	var wg sync.WaitGroup
	started := 0
	for end := time.Now().Add(dur); time.Now().Before(end); <-tick.C {
		cmd := exec.Command("/bin/true")
		if cmd.Start() != nil {
			continue
		}
		started++
		wg.Add(1)
		go func() { defer wg.Done(); _ = cmd.Wait() }()
	}
	wg.Wait()
	fmt.Println(started)
	os.Exit(0)
}

// stepMeter adds a fixed amount of energy at every read.
type stepMeter struct{ j float64 }

func (m *stepMeter) Name() string    { return "rapl" }
func (m *stepMeter) Estimated() bool { return false }
func (m *stepMeter) Read(context.Context) ([]reading.ZoneSample, error) {
	m.j += 10
	return []reading.ZoneSample{{Zone: "package", Socket: 0, Joules: m.j}}, nil
}

// Churn at rate: 500 short-lived processes a second for 20 s, with the real
// BPF accounting and the loop stepping every second, as the exporter keeps
// the top 20 ended processes (collector.process.top). The ended processes
// published stay within those 20 and the last step's exits, the ledger
// holds no more than a few steps' worth of ended processes, the heap does
// not grow with the processes that came and went, and the cgroup they ran
// in gets the CPU time the kernel charged it.
func TestChurnKeepsRetentionBounded(t *testing.T) {
	testenv.RequireRoot(t)
	h, err := cgroup.Detect("/proc", "/sys/fs/cgroup", "auto")
	if err != nil {
		t.Fatal(err)
	}
	src, err := bpfloader.Load(bpfloader.Options{Hierarchy: h})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	res := cgroup.NewResolver(h)
	const kept, rate, window = 20, 500, 20 * time.Second
	l, err := New(Config{Interval: time.Second, Retention: 5 * time.Minute, IdlePolicy: "none",
		Hierarchy: string(h.Kind), EndedProcesses: kept}, src, &stepMeter{}, res, nil)
	if err != nil {
		t.Fatal(err)
	}
	var led *ledger
	for _, s := range l.stages {
		if v, ok := s.(*ledger); ok {
			led = v
		}
	}
	dir := testenv.Cgroup(t, h.Mount, "churn")
	rel, _ := filepath.Rel(h.Mount, dir)
	rel = "/" + rel
	id := testenv.Inode(t, dir)

	now := time.Now()
	l.Step(now)
	u0, err := res.Usage(rel)
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	churn := exec.Command("/bin/sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$1"`, dir, exe)
	churn.Env = append(os.Environ(), fmt.Sprintf("%s=%d:%s", churnEnv, rate, window))
	var out bytes.Buffer
	churn.Stdout, churn.Stderr = &out, os.Stderr
	if err := churn.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.Kill(churn) })
	done := make(chan error, 1)
	go func() { done <- churn.Wait() }()

	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	var heap5 uint64
	maxEnded, maxLedger, maxLive, steps := 0, 0, 0, 0
	var endedBy []int // the ended processes published, step by step
	// The longest wall time between two steps: a step's exits are a
	// second's only when the step came a second after the one before,
	// which a loaded machine does not keep to.
	var maxGap time.Duration
	last := time.Now()
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("churner: %v", err)
			}
			running = false
		case <-time.After(time.Second):
		}
		now = now.Add(time.Second)
		maxGap = max(maxGap, time.Since(last))
		last = time.Now()
		l.Step(now)
		steps++
		ended, live := 0, 0
		for _, p := range l.Snapshot().Processes {
			if p.Alive {
				live++
			} else {
				ended++
			}
		}
		endedBy = append(endedBy, ended)
		maxEnded, maxLedger, maxLive = max(maxEnded, ended), max(maxLedger, len(led.procs)), max(maxLive, live)
		if steps == 5 {
			heap5 = heap()
		}
	}
	// The last processes' final runtime reaches the maps at their free, an
	// RCU grace period after their exit.
	time.Sleep(200 * time.Millisecond)
	for range 2 {
		now = now.Add(time.Second)
		l.Step(now)
	}
	heapEnd := heap()
	u1, err := res.Usage(rel)
	if err != nil {
		t.Fatal(err)
	}
	started, _ := strconv.Atoi(strings.TrimSpace(out.String()))
	var cpu float64
	for _, c := range l.Snapshot().Cgroups {
		if c.CgroupID == id {
			cpu = c.CPUSeconds
		}
	}
	kernel := float64(u1-u0) / 1e9
	t.Logf("%d processes in %v (%.0f/s) over %d steps (at most %v apart): ended processes published %v, at most %d live, at most %d in the ledger; heap %.1f MiB after 5 steps, %.1f MiB at the end; cgroup CPU %.4f s, kernel %.4f s",
		started, window, float64(started)/window.Seconds(), steps, maxGap.Round(time.Millisecond), endedBy, maxLive, maxLedger, float64(heap5)/(1<<20), float64(heapEnd)/(1<<20), cpu, kernel)
	// The exits of the longest gap between steps, a second at least.
	perGap := int(float64(rate) * max(1, maxGap.Seconds()))
	if float64(started) < 0.8*rate*window.Seconds() {
		t.Errorf("the churner started %d processes in %v, want about %d a second", started, window, rate)
	}
	// Published: the kept ones, and the exits the source still reports,
	// which go at the step after it stops reporting them unless among the
	// kept. On a quiet machine that is one step's exits (about 500 a step
	// here); under load, with exits reaped and freed later, the source
	// reported each for up to four steps (2,069 published in one run at
	// load 4.6; 1,046 in a CI run).
	// Nothing accumulates: 20 s of exits are 10,000 processes, and
	// unbounded retention planted back published 9,686.
	if limit := kept + 5*perGap; maxEnded > limit {
		t.Errorf("%d ended processes published, want at most %d: the %d kept and the exits of the last steps", maxEnded, limit, kept)
	}
	// The ledger: the node's live processes, the kept ones and the exits
	// of the last steps that the source still reports.
	if limit := maxLive + kept + 6*perGap; maxLedger > limit {
		t.Errorf("the ledger held %d processes, want at most %d", maxLedger, limit)
	}
	if heapEnd > heap5+4<<20 {
		t.Errorf("heap grew from %.1f to %.1f MiB over %d processes that ended", float64(heap5)/(1<<20), float64(heapEnd)/(1<<20), started)
	}
	if d := testenv.RelDiff(cpu, kernel); d > 0.01 {
		t.Errorf("cgroup CPU %.4f s, kernel %.4f s: %.2f%% off", cpu, kernel, 100*d)
	}
}
