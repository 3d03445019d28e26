package stats

import (
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

type fakeProbes struct {
	r         reading.ProbeReading
	forgotten []reading.ProcKey
}

func (f *fakeProbes) Read() (reading.ProbeReading, error) { return f.r, nil }
func (f *fakeProbes) Forget(p []reading.ProcKey, _ []uint64) error {
	f.forgotten = append(f.forgotten, p...)
	return nil
}
func (f *fakeProbes) Active() []string   { return []string{"net", "softirq"} }
func (f *fakeProbes) Counters() []string { return nil }

// Probe counters reach cgroups and processes as cumulative sums of what
// each read added, and a dead process's entries are forgotten after its
// last read.
func TestProbesAbsorbed(t *testing.T) {
	src := &fakeSource{}
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	p := &fakeProbes{}
	l, err := New(Config{Interval: time.Second, Retention: time.Minute, IdlePolicy: "none"}, src, m, names{1: "/a"}, nil, WithProbes(p))
	if err != nil {
		t.Fatal(err)
	}
	src.add(1, 7, 0, 1e9)
	key := src.r.Processes[0].Key
	p.r = reading.ProbeReading{
		Cgroups:   []reading.ProbeCgroup{{ID: 1, ProbeStats: reading.ProbeStats{TCPSentBytes: 100}}},
		Processes: []reading.ProbeProcess{{Key: key, ProbeStats: reading.ProbeStats{TCPSentBytes: 100}}},
		Softirqs:  []reading.SoftirqVector{{Name: "NET_RX", Count: 5, Ns: 1000}},
	}
	l.Step(time.Unix(0, 0))
	p.r.Cgroups[0].TCPSentBytes = 350
	p.r.Processes[0].TCPSentBytes = 350
	src.r.Processes[0].Alive = false
	l.Step(time.Unix(1, 0))
	s := l.Snapshot()
	if a := cgroupByPath(s, "/a"); a.Probes == nil || a.Probes.TCPSentBytes != 350 {
		t.Errorf("cgroup probes: %+v", a.Probes)
	}
	if len(s.Processes) != 1 || s.Processes[0].Probes != nil {
		t.Errorf("processes carry probe counters nobody exports: %+v", s.Processes)
	}
	if len(p.forgotten) != 1 || p.forgotten[0] != key {
		t.Errorf("forgotten %v, want [%v]", p.forgotten, key)
	}
	if len(s.Softirqs) != 1 || s.Softirqs[0].Count != 5 || len(s.Probes) != 2 {
		t.Errorf("node softirqs %+v, probes %v", s.Softirqs, s.Probes)
	}
}

type countingProbes struct {
	fakeProbes
	counters []string
}

func (c *countingProbes) Counters() []string { return c.counters }

// Switching a zone's usage metric changes its attribution: A used three
// times B's CPU, B retired three times A's instructions.
func TestUsageMetricSwitch(t *testing.T) {
	for _, c := range []struct {
		metric     string
		wantA      float64
		wantB      float64
		counterRun bool
	}{
		{"cpu_time", 75, 25, true},
		{"instructions", 25, 75, true},
		{"instructions", 75, 25, false}, // counter not read: falls back to CPU time
	} {
		src := &fakeSource{}
		m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
		p := &countingProbes{}
		if c.counterRun {
			p.counters = []string{"cycles", "instructions"}
		}
		l, err := New(Config{Interval: time.Second, CPUs: 4, IdlePolicy: "none", IdleWatts: map[string]float64{"package": 0},
			UsageMetric: map[string]string{"package": c.metric}}, src, m, names{1: "/a", 2: "/b"}, nil, WithProbes(p))
		if err != nil {
			t.Fatal(err)
		}
		src.add(1, 1, 0, 0)
		src.add(2, 2, 0, 0)
		l.Step(time.Unix(0, 0))
		src.add(1, 1, 0, 3e9)
		src.add(2, 2, 0, 1e9)
		p.r.Cgroups = []reading.ProbeCgroup{
			{ID: 1, ProbeStats: reading.ProbeStats{Counters: [reading.MaxCounters]uint64{500, 1e6}}},
			{ID: 2, ProbeStats: reading.ProbeStats{Counters: [reading.MaxCounters]uint64{500, 3e6}}},
		}
		m.samples[0].Joules = 100
		l.Step(time.Unix(1, 0))
		s := l.Snapshot()
		a, b := cgroupByPath(s, "/a").Energy.Get("package").DynamicJ, cgroupByPath(s, "/b").Energy.Get("package").DynamicJ
		if a != c.wantA || b != c.wantB {
			t.Errorf("metric %s (counter read %v): A %v J, B %v J; want %v and %v", c.metric, c.counterRun, a, b, c.wantA, c.wantB)
		}
	}
}

// A workload's probe counters are the sum of its cgroups' growth: two steps
// of one job, read twice, give the job both steps' bytes.
func TestProbesRollUp(t *testing.T) {
	src := &fakeSource{}
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	p := &fakeProbes{}
	paths := names{1: "/slurm_n1/uid_0/job_42/step_0", 2: "/slurm_n1/uid_0/job_42/step_1"}
	ids := workload.NewResolver(workload.Options{EtcRoot: t.TempDir(), ProcRoot: t.TempDir()})
	l, err := New(Config{Interval: time.Second, Retention: time.Minute, IdlePolicy: "none"}, src, m, paths, nil,
		WithProbes(p), WithWorkloads(ids, []ident.Kind{ident.KindJob}))
	if err != nil {
		t.Fatal(err)
	}
	src.add(1, 1, 0, 1e9)
	src.add(2, 2, 0, 1e9)
	p.r = reading.ProbeReading{Cgroups: []reading.ProbeCgroup{
		{ID: 1, ProbeStats: reading.ProbeStats{TCPSentBytes: 100, SoftirqCount: 1}},
		{ID: 2, ProbeStats: reading.ProbeStats{TCPSentBytes: 10}},
	}}
	l.Step(time.Unix(0, 0))
	p.r.Cgroups[0].TCPSentBytes = 350
	p.r.Cgroups[1].TCPSentBytes = 30
	l.Step(time.Unix(1, 0))
	job, ok := unitBy(l.Snapshot(), ident.KindJob, "42")
	if !ok || job.Probes == nil || job.Probes.TCPSentBytes != 380 || job.Probes.SoftirqCount != 1 {
		t.Errorf("job probes %+v, want 380 bytes sent and 1 softirq", job.Probes)
	}
}
