package stats

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
)

func bpfHealth(s *snapshot.Snapshot) reading.SourceHealth {
	for _, h := range s.Meters {
		if h.Source == "bpf" {
			return h
		}
	}
	return reading.SourceHealth{}
}

// The BPF maps' CPU counters pass the ledger's check: one read of
// UINT64_MAX, a step back and a jump faster than the CPUs can run are
// rejected, counted under source "bpf" and never credited; the good
// intervals around them are.
func TestBPFCountersValidated(t *testing.T) {
	src := &fakeSource{}
	l, err := New(Config{Interval: time.Second, CPUs: 2, IdlePolicy: "none"}, src, &fakeMeter{}, names{1: "/a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	set := func(ns uint64) {
		src.r.Cgroups = []reading.CgroupUsage{{ID: 1, CPUNs: ns}}
		src.r.Processes = []reading.ProcessUsage{{Key: reading.ProcKey{PID: 9}, Cgroup: 1, CPUNs: ns, Alive: true}}
	}
	t0 := time.Unix(1000, 0)
	steps := []struct {
		ns        uint64
		wantTotal float64 // the cgroup's exported CPU seconds after the step
	}{
		{100e9, 100},          // baseline: history
		{101e9, 101},          // +1 s in 1 s
		{math.MaxUint64, 101}, // garbage: rejected
		{102e9, 102},          // continues from 101 s: +1 s over 2 s
		{50e9, 102},           // 52 s back: rejected
		{103e9, 103},          // continues: +1 s
		{103e9 + 5e9, 103},    // +5 s in 1 s on 2 CPUs: rejected
		{104.5e9, 104.5},      // continues from the last good one: +1.5 s over 2 s
		{0.5e9, 105},          // the source forgot the key and counts afresh: +0.5 s
		{1e9, 105.5},          // +0.5 s
	}
	for i, st := range steps {
		set(st.ns)
		l.Step(t0.Add(time.Duration(i) * time.Second))
		s := l.Snapshot()
		if got := cgroupByPath(s, "/a").CPUSeconds; math.Abs(got-st.wantTotal) > 1e-9 {
			t.Errorf("step %d (%d ns): cgroup /a at %v s, want %v", i, st.ns, got, st.wantTotal)
		}
		if got := s.Processes[0].CPUSeconds; math.Abs(got-st.wantTotal) > 1e-9 {
			t.Errorf("step %d (%d ns): process at %v s, want %v", i, st.ns, got, st.wantTotal)
		}
	}
	h := bpfHealth(l.Snapshot())
	// Each rejected reading counts twice: the cgroup's and the process's.
	want := map[string]uint64{"too_fast": 4, "backwards": 2}
	if len(h.Rejected) != len(want) || h.Rejected["too_fast"] != 4 || h.Rejected["backwards"] != 2 || !h.Up || h.Reads != uint64(len(steps)) {
		t.Errorf("bpf health %+v, want rejections %v, up, %d reads", h, want, len(steps))
	}
}

// Random sequences of BPF counter readings (steady growth, single glitches:
// huge values, steps back, jumps): the exported CPU seconds never decrease, are
// never NaN or Inf, never grow faster than CPUs × Δt over any span, every
// interval whose readings are both good is credited in full, and once the
// readings are good again nothing is lost.
func TestBPFCountersProperty(t *testing.T) {
	const cpus = 4
	for seed := uint64(0); seed < 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 1))
		src := &fakeSource{}
		l, err := New(Config{Interval: time.Second, CPUs: cpus, IdlePolicy: "none"}, src, &fakeMeter{}, names{1: "/a"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Unix(1000, 0)
		// Large enough that a step back is never taken for the source
		// counting a forgotten cgroup afresh (see cpuCheck).
		truth := uint64(1e12 + rng.IntN(1e12))
		prevGood, prevOut := true, 0.0
		var outs []float64
		rejected := 0
		for i := 0; i < 60; i++ {
			grow := uint64(rng.Float64() * cpus * 1e9)
			truth += grow
			v, good := truth, true
			switch r := rng.IntN(10); {
			case i == 0 || i == 59 || !prevGood:
				// The baseline and the last reading are good, and so is
				// the one after a bad one: two bad readings consistent
				// with each other would be a reset (one interval lost).
			case r == 0:
				v, good = math.MaxUint64-uint64(rng.IntN(1000)), false
			case r == 1:
				// Below every earlier reading (they grew < 240 s from
				// ≥ 1000 s), and above what the source counting afresh
				// could reach (CPUs × 60 s).
				v, good = uint64(3e11+rng.IntN(int(truth/2-3e11))), false
			case r == 2:
				v, good = truth+uint64(cpus*1e9*(100+rng.Float64()*1e6)), false
			}
			src.r.Cgroups = []reading.CgroupUsage{{ID: 1, CPUNs: v}}
			l.Step(t0.Add(time.Duration(i) * time.Second))
			out := cgroupByPath(l.Snapshot(), "/a").CPUSeconds
			if math.IsNaN(out) || math.IsInf(out, 0) || out < prevOut {
				t.Fatalf("seed %d step %d: exported %v after %v", seed, i, out, prevOut)
			}
			for k, o := range outs {
				if k > 0 && o == outs[k-1] {
					continue // not credited at k: the span starts earlier
				}
				if out-o > cpus*float64(i-k)*1.000001 {
					t.Fatalf("seed %d step %d: +%v s in %d s on %d CPUs", seed, i, out-o, i-k, cpus)
				}
			}
			outs = append(outs, out)
			if !good {
				rejected++
			}
			if i > 0 && good && prevGood {
				if math.Abs(out-prevOut-float64(grow)/1e9) > 1e-6 {
					t.Fatalf("seed %d step %d: good interval credited %v s, want %v", seed, i, out-prevOut, float64(grow)/1e9)
				}
			}
			prevGood, prevOut = good, out
		}
		if got := prevOut; math.Abs(got-float64(truth)/1e9) > 1e-6 {
			t.Fatalf("seed %d: %v s exported, %v s used: something was lost or invented", seed, got, float64(truth)/1e9)
		}
		var counted uint64
		for _, n := range bpfHealth(l.Snapshot()).Rejected {
			counted += n
		}
		if counted != uint64(rejected) {
			t.Fatalf("seed %d: %d rejections counted, %d bad readings", seed, counted, rejected)
		}
	}
}

// A read the loop took late covers more time than its stamp says: every
// CPU busy for the whole span is credited, not rejected as too fast. The
// stamps are 1 s apart; the reads were 1.6 s apart, with two CPUs busy
// throughout. Synthetic stamps further apart than the wall-clock reads
// (as tests step time) keep their own span.
func TestCPUCheckTimesLateReads(t *testing.T) {
	k := newCPUCheck("bpf", 2, nil)
	t0, w0 := time.Unix(1000, 0), time.Unix(5000, 0)
	k.advance(t0, w0, true)
	c := k.counter(true)
	if d := k.delta(c, 10e9, func() string { return "cgroup" }); d != 0 {
		t.Fatalf("baseline credited %d", d)
	}
	k.advance(t0.Add(time.Second), w0.Add(1600*time.Millisecond), false)
	if d := k.delta(c, 10e9+3.2e9, func() string { return "cgroup" }); d != 3.2e9 {
		t.Errorf("2 CPUs busy for a late read's 1.6 s: credited %d ns, want 3.2e9", d)
	}
	fresh := k.counter(false) // a key first seen in this read
	k.advance(t0.Add(6*time.Second), w0.Add(1601*time.Millisecond), false)
	if d := k.delta(c, 10e9+3.2e9+9.9e9, func() string { return "cgroup" }); d != 9.9e9 {
		t.Errorf("5 s stamped, 1 ms of wall clock: credited %d ns, want 9.9e9", d)
	}
	if d := k.delta(fresh, 0.5e9, func() string { return "new cgroup" }); d != 0.5e9 {
		t.Errorf("new key: credited %d ns, want 0.5e9", d)
	}
	if d := k.delta(c, 10e9+3.2e9+9.9e9+20e9, func() string { return "cgroup" }); d != 0 {
		t.Errorf("garbage jump credited %d ns", d)
	}
	if got := k.Health()[0].Rejected["too_fast"]; got != 1 {
		t.Errorf("too_fast rejections %d, want 1 (the garbage jump)", got)
	}
}
