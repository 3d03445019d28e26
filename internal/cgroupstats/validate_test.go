package cgroupstats

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
)

// clock is a settable time for the reader's rate checks.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func v2Reader(t *testing.T, cpus int) (*Reader, string, *clock) {
	t.Helper()
	root := copyFixture(t)
	c := &clock{t: time.Unix(1000, 0)}
	r := NewReaderWith(fixtureLayout(root, true), Options{SysfsRoot: filepath.Join(root, "sysfs"), CPUs: cpus, now: c.now})
	return r, filepath.Join(root, "cgroup-v2", v2Job), c
}

func rejected(r *Reader) map[string]uint64 { return r.Health()[0].Rejected }

// Bad cgroupfs readings never reach a counter: a cpu.stat of UINT64_MAX µs,
// a CPU counter stepping back, CPU growing faster than the CPUs can run, a
// PSI total jumping by more than the elapsed time and a memory.current of
// 2^60 are rejected and counted under source "cgroupfs"; the counters keep
// their last good values, the gauge is marked unavailable, and good
// readings after them are taken.
func TestBadReadingsRejected(t *testing.T) {
	r, dir, c := v2Reader(t, 2)
	cpu := func(user uint64) {
		writeFile(t, filepath.Join(dir, "cpu.stat"), fmt.Sprintf("usage_usec %d\nuser_usec %d\nsystem_usec 5000000\n", user+5000000, user))
	}
	read := func() reading.Resources {
		t.Helper()
		s, err := r.Read(v2Job)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	steps := []struct {
		user     uint64 // µs
		wantUser float64
	}{
		{10_000_000, 10},
		{11_000_000, 11},         // +1 s in 1 s
		{math.MaxUint64 / 2, 11}, // garbage
		{12_000_000, 12},         // continues: +1 s over 2 s
		{2_000_000, 12},          // 10 s back
		{13_000_000, 13},         // continues
		{13_000_000 + 9e6, 13},   // +9 s in 1 s on 2 CPUs
		{14_500_000, 14.5},       // continues: +1.5 s over 2 s
	}
	for i, st := range steps {
		c.t = c.t.Add(time.Second)
		cpu(st.user)
		if s := read(); s.CPUUserSeconds != st.wantUser || s.CPUSystemSeconds != 5 {
			t.Errorf("step %d (%d µs): user %v s, system %v s; want %v and 5", i, st.user, s.CPUUserSeconds, s.CPUSystemSeconds, st.wantUser)
		}
	}
	if got := rejected(r); got["too_fast"] != 2 || got["backwards"] != 1 || len(got) != 2 {
		t.Errorf("rejections %v, want too_fast 2, backwards 1", got)
	}

	// PSI: cpu some total 2.5 s; +10 s in 1 s is impossible.
	c.t = c.t.Add(time.Second)
	writeFile(t, filepath.Join(dir, "cpu.pressure"), "some avg10=0 avg60=0 avg300=0 total=12500000\nfull avg10=0 avg60=0 avg300=0 total=1000000\n")
	if s := read(); s.PSI[reading.PSICPU].SomeSeconds != 2.5 {
		t.Errorf("cpu pressure some %v s after a 10 s jump in 1 s, want the last good 2.5", s.PSI[reading.PSICPU].SomeSeconds)
	}
	// A memory gauge beyond a PiB is not exported.
	writeFile(t, filepath.Join(dir, "memory.current"), "1152921504606846976\n")
	if s := read(); s.Available.Has(reading.FieldMemoryCurrent) {
		t.Errorf("memory.current of 2^60 available (%d)", s.MemoryCurrent)
	}
	if got := rejected(r); got["too_fast"] != 3 || got["out_of_range"] != 1 {
		t.Errorf("rejections %v, want too_fast 3 (2 CPU, 1 PSI), out_of_range 1", got)
	}
	h := r.Health()[0]
	if h.Source != "cgroupfs" || h.Reads != uint64(len(steps)+2) || h.Errors != 0 {
		t.Errorf("health %+v, want cgroupfs, %d reads, no errors", h, len(steps)+2)
	}
}

// A cgroup removed and re-created under the same path starts afresh: the
// reader forgets a cgroup that is gone, so the new one's lower counters
// are not taken for a step back.
func TestRecreatedCgroupStartsAfresh(t *testing.T) {
	r, dir, c := v2Reader(t, 2)
	if _, err := r.Read(v2Job); err != nil {
		t.Fatal(err)
	}
	tmp := dir + ".away"
	if err := os.Rename(dir, tmp); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(v2Job); err == nil {
		t.Fatal("read of a removed cgroup succeeded")
	}
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "cpu.stat"), "user_usec 1000\nsystem_usec 2000\n")
	c.t = c.t.Add(time.Second)
	s, err := r.Read(v2Job)
	if err != nil {
		t.Fatal(err)
	}
	if s.CPUUserSeconds != 0.001 || len(rejected(r)) != 0 {
		t.Errorf("re-created: user %v s, rejections %v; want 0.001 s, none", s.CPUUserSeconds, rejected(r))
	}
}

// Random sequences of cgroupfs readings (steady growth, glitches: garbage,
// huge values, steps back, jumps, a missing file): the exported CPU, PSI
// and IO counters never decrease, are never NaN or Inf, never grow faster
// than their ceilings over any span, every interval whose readings are
// both good is credited in full, nothing is lost once the readings are
// good again, and every bad reading is counted (a missing file is no
// rejection: the field is then unavailable).
func TestReaderProperty(t *testing.T) {
	const cpus = 4
	for seed := uint64(0); seed < 100; seed++ {
		rng := rand.New(rand.NewPCG(seed, 2))
		r, dir, c := v2Reader(t, cpus)
		truth := uint64(1e9 + rng.IntN(1e9)) // µs of user CPU
		psi := uint64(1e6)                   // µs of cpu pressure
		rbytes := uint64(1e9)
		var outs []propertyPoint
		var at []int
		prevGood, wantRejected := true, 0
		for i := 0; i < 40; i++ {
			c.t = c.t.Add(time.Second)
			grow := uint64(rng.Float64() * cpus * 1e6)
			truth += grow
			psi += uint64(rng.Float64() * 1e6)
			rbytes += uint64(rng.IntN(1e8))
			user, p, rb, good, missing := truth, psi, rbytes, true, false
			switch x := rng.IntN(12); {
			case i == 0 || i == 39 || !prevGood:
			case x == 0:
				user, p, rb, good = math.MaxUint64-uint64(rng.IntN(1000)), math.MaxUint64/2, math.MaxUint64/3, false
				wantRejected += 3
			case x == 1:
				user, p, rb, good = truth/4, psi/4, rbytes/4, false
				wantRejected += 3
			case x == 2: // IO stays good
				user, p, good = truth+uint64(cpus*1e6*(100+rng.Float64()*1e6)), psi+uint64(1e6*(100+rng.Float64()*1e6)), false
				wantRejected += 2
			case x == 3: // unavailable, not a rejection
				missing, good = true, false
			}
			if missing {
				os.Remove(filepath.Join(dir, "cpu.stat"))
			} else {
				writeFile(t, filepath.Join(dir, "cpu.stat"), fmt.Sprintf("user_usec %d\nsystem_usec 0\n", user))
			}
			writeFile(t, filepath.Join(dir, "cpu.pressure"), fmt.Sprintf("some avg10=0 avg60=0 avg300=0 total=%d\nfull avg10=0 avg60=0 avg300=0 total=0\n", p))
			writeFile(t, filepath.Join(dir, "io.stat"), fmt.Sprintf("8:0 rbytes=%d wbytes=0 rios=1 wios=0 dbytes=0 dios=0\n", rb))
			s, err := r.Read(v2Job)
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, i, err)
			}
			if !s.Available.Has(reading.FieldCPU) {
				if !missing {
					t.Fatalf("seed %d step %d: CPU unavailable", seed, i)
				}
				prevGood = false
				continue
			}
			o := propertyPoint{s.CPUUserSeconds, s.PSI[reading.PSICPU].SomeSeconds, float64(s.IO[0].ReadBytes)}
			o.check(t, fmt.Sprintf("seed %d step %d", seed, i), outs, at, i, cpus)
			if n := len(outs); n > 0 && good && prevGood && math.Abs(o.user-outs[n-1].user-float64(grow)/1e6) > 1e-6 {
				t.Fatalf("seed %d step %d: good interval credited %v s, want %v", seed, i, o.user-outs[n-1].user, float64(grow)/1e6)
			}
			outs, at = append(outs, o), append(at, i)
			prevGood = good
		}
		last := outs[len(outs)-1]
		if math.Abs(last.user-float64(truth)/1e6) > 1e-6 || math.Abs(last.psi-float64(psi)/1e6) > 1e-6 || last.rbytes != float64(rbytes) {
			t.Fatalf("seed %d: ended at %v, truth user %v s, psi %v s, rbytes %d: something was lost or invented",
				seed, last, float64(truth)/1e6, float64(psi)/1e6, rbytes)
		}
		var counted int
		for _, n := range r.Health()[0].Rejected {
			counted += int(n)
		}
		if counted != wantRejected {
			t.Fatalf("seed %d: %d rejections counted, want %d", seed, counted, wantRejected)
		}
	}
}

// propertyPoint is what TestReaderProperty's reader exported at one step:
// user CPU and CPU pressure seconds, bytes read.
type propertyPoint struct{ user, psi, rbytes float64 }

// check: o, exported at step i, is finite, and against each earlier
// output (outs, at steps at) no counter decreased and the CPU grew no
// faster than cpus CPUs allow over the span.
func (o propertyPoint) check(t *testing.T, where string, outs []propertyPoint, at []int, i, cpus int) {
	t.Helper()
	for _, v := range []float64{o.user, o.psi, o.rbytes} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			t.Fatalf("%s: exported %v", where, o)
		}
	}
	for k, q := range outs {
		span := float64(i - at[k])
		if o.user < q.user || o.psi < q.psi || o.rbytes < q.rbytes {
			t.Fatalf("%s: %v after %v: a counter decreased", where, o, q)
		}
		if k > 0 && q.user == outs[k-1].user {
			continue // not credited then: its span starts earlier
		}
		if o.user-q.user > float64(cpus)*span*1.000001 {
			t.Fatalf("%s: CPU +%v s in %v s on %d CPUs", where, o.user-q.user, span, cpus)
		}
	}
}
