package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/cgroup"
)

// procStat reads a process's CPU time (utime+stime, seconds) and resident
// set size (bytes).
func procStat(pid int) (cpu float64, rss int64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	pages, _ := strconv.ParseInt(f[21], 10, 64)
	return (ut + st) / 100, pages * int64(os.Getpagesize()), nil
}

// population starts cgroups × perCgroup sleeping processes, each cgroup's
// born inside it, and waits until they are all there.
func population(b *testing.B, mount string, cgroups, perCgroup int) {
	top := testenv.Cgroup(b, mount, "scale")
	for i := 0; i < cgroups; i++ {
		dir := testenv.Mkdir(b, filepath.Join(top, fmt.Sprintf("cg-%04d", i)))
		script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do sleep 3600 & i=$((i+1)); done; exec sleep 3600`, perCgroup-1)
		testenv.StartIn(b, dir, "/bin/sh", "-c", script)
	}
	want := cgroups * perCgroup
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		n := 0
		entries, _ := os.ReadDir(top)
		for _, e := range entries {
			data, _ := os.ReadFile(filepath.Join(top, e.Name(), "cgroup.procs"))
			n += len(strings.Fields(string(data)))
		}
		if n >= want {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d processes started", n, want)
		}
	}
}

func scrapeTimed(b *testing.B, url string) time.Duration {
	t0 := time.Now()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return time.Since(t0)
}

// BenchmarkScale runs the real exporter (BPF mode, defaults plus the
// process collector's top-N) over a machine with many cgroups and
// processes and reports scrape latency, RSS and the exporter's own CPU at a
// 15 s scrape, idle and under stress-ng. It takes a few minutes.
func BenchmarkScale(b *testing.B) {
	testenv.RequireRoot(b)
	for _, c := range []struct{ cgroups, per int }{{100, 10}, {1000, 10}} {
		b.Run(fmt.Sprintf("cgroups=%d,procs=%d", c.cgroups, c.cgroups*c.per), func(b *testing.B) {
			h, err := cgroup.Detect("/proc", "/sys/fs/cgroup", "auto")
			if err != nil {
				b.Fatal(err)
			}
			population(b, h.Mount, c.cgroups, c.per)
			bin := buildExporter(b)
			addr := fmt.Sprintf("localhost:%d", testenv.FreePort(b))
			cmd := exec.Command(bin, "--web.listen-address="+addr, "--collector.process", "--log.level=warn")
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			url := "http://" + addr
			time.Sleep(7 * time.Second) // baseline plus two intervals

			// Scrape latency. The first finds the snapshot older than
			// the interval: on demand, it steps the loop and renders
			// (cold); most of the others copy that rendering.
			var lat []time.Duration
			for i := 0; i < 100; i++ {
				lat = append(lat, scrapeTimed(b, url))
			}
			cold := lat[0]
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			_, rss, _ := procStat(cmd.Process.Pid)

			// Own CPU over 60 s at one scrape per 15 s, idle then loaded.
			// Those scrapes, 15 s apart, each get a new snapshot: once
			// their period is learnt, the loop steps and renders it just
			// before each (fresh-p50), else the scrape does (cold).
			var fresh []time.Duration
			cpuOver := func() float64 {
				c0, _, _ := procStat(cmd.Process.Pid)
				t0 := time.Now()
				for i := 0; i < 4; i++ {
					fresh = append(fresh, scrapeTimed(b, url))
					time.Sleep(15 * time.Second)
				}
				c1, _, _ := procStat(cmd.Process.Pid)
				return 100 * (c1 - c0) / time.Since(t0).Seconds()
			}
			idle := cpuOver()
			stress := exec.Command(testenv.Tool(b, "stress-ng", "stress-ng"), "--cpu", "2", "--switch", "1", "--timeout", "70s", "--quiet")
			if err := stress.Start(); err != nil {
				b.Fatalf("stress-ng: %v", err)
			}
			loaded := cpuOver()
			_ = stress.Process.Kill()
			_ = stress.Wait()

			b.ReportMetric(float64(cold.Microseconds())/1000, "cold-ms")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(lat[len(lat)*95/100].Microseconds())/1000, "p95-ms")
			sort.Slice(fresh, func(i, j int) bool { return fresh[i] < fresh[j] })
			b.ReportMetric(float64(fresh[len(fresh)/2].Microseconds())/1000, "fresh-p50-ms")
			b.ReportMetric(float64(rss)/(1<<20), "rss-MiB")
			b.ReportMetric(idle, "cpu-%-idle")
			b.ReportMetric(loaded, "cpu-%-stress")
		})
	}
}
