package power

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/wattrace/wattrace/pkg/power/curves"
	"github.com/wattrace/wattrace/pkg/reading"
)

// bentZone is a curve that bends, as SPECpower's does (a step from idle
// to 10%, then straight): on a straight line the steal correction would
// not move the watts, only the band.
func bentZone() EstimatedZone {
	var c curves.Curve
	for l := range c.Points {
		w := 10.0
		if l > 0 {
			w = 20 + 10*float64(l)
		}
		c.Points[l] = curves.Estimate{Watts: w, Lower: 0.8 * w, Upper: 1.25 * w}
	}
	c.Info = curves.Info{Kind: curves.KindVM, Tier: "test", Source: "test"}
	return EstimatedZone{Zone: reading.ZonePackage, Curve: c}
}

// fakeSteal is a steal counter the test moves.
type fakeSteal struct {
	v   time.Duration
	err error
}

func (f *fakeSteal) read() (time.Duration, error) { return f.v, f.err }

// A 4-vCPU guest busy 14 of its 40 vCPU-seconds in a 10 s interval, 12 of
// them stolen (30%): its load is 14/28 = 50%, and its power the curve's
// idle plus 70% of the dynamic watts there: 10 + 0.7 × (70 − 10) = 52 W,
// 520 J, of which 420 J dynamic; the band 8 + 0.7 × (56 − 8) = 41.6 W to
// 87.5 W, the upper end as if the stolen time were the guest's. Ignoring
// steal, the curve at 35% gives 55 W (550 J).
func TestEstimatorSteal(t *testing.T) {
	e, err := NewEstimator(bentZone())
	if err != nil {
		t.Fatal(err)
	}
	st := &fakeSteal{v: 100 * time.Second}
	if err := e.SetSteal(st.read, 4, nil); err != nil {
		t.Fatal(err)
	}
	// What was stolen before the stats loop's baseline is nobody's.
	st.v += 5 * time.Second
	e.Advance(0, 0)
	st.v += 12 * time.Second
	e.Advance(0.35, 10*time.Second)
	joules := func() (float64, float64) {
		s, _ := e.Read(context.Background())
		d, _ := e.ReadDynamic()
		return s[0].Joules, d[0].Joules
	}
	if j, dyn := joules(); math.Abs(j-520) > 1e-9 || math.Abs(dyn-420) > 1e-9 {
		t.Errorf("30%% stolen: %v J (%v J dynamic), want 520 J (420 J)", j, dyn)
	}
	if f, ok := e.StolenFraction(); !ok || math.Abs(f-0.3) > 1e-12 {
		t.Errorf("stolen fraction %v %v, want 0.3", f, ok)
	}
	est := e.Estimates()[0]
	if math.Abs(est.Watts-52) > 1e-9 || math.Abs(est.LowerW-41.6) > 1e-9 || math.Abs(est.UpperW-87.5) > 1e-9 {
		t.Errorf("estimate %+v, want 52 W in [41.6, 87.5]", est)
	}
	if h := e.Health()[0]; len(h.Rejected) != 0 {
		t.Errorf("rejected %v, want none", h.Rejected)
	}

	// A counter that goes back is rejected and counted; that interval
	// is estimated as if nothing were stolen (55 W at 35%).
	st.v -= time.Second
	e.Advance(0.35, 10*time.Second)
	if j, _ := joules(); math.Abs(j-1070) > 1e-9 {
		t.Errorf("after a backwards steal reading: %v J, want 520 + 550", j)
	}
	// The next good reading continues from the last accepted one, over
	// both intervals: 12 s of 80 vCPU-seconds is 15%; at 30% busy the
	// load is 0.3/0.85, the power 10 + 0.85 × (P(0.3529…) − 10).
	st.v += 13 * time.Second
	e.Advance(0.3, 10*time.Second)
	load := 0.3 / 0.85
	p := 20 + 100*load // the straight part of the curve
	if j, _ := joules(); math.Abs(j-(1070+10*(10+0.85*(p-10)))) > 1e-9 {
		t.Errorf("after the glitch: %v J, want %v", j, 1070+10*(10+0.85*(p-10)))
	}
	// Faster than every vCPU stolen all the time, and unreadable: both
	// rejected and counted.
	st.v += 41 * time.Second
	e.Advance(0.5, 10*time.Second)
	st.err = errors.New("gone")
	e.Advance(0.5, 10*time.Second)
	if h := e.Health()[0]; h.Rejected["backwards"] != 1 || h.Rejected["too_fast"] != 1 || h.Rejected["unreadable"] != 1 {
		t.Errorf("rejected %v, want one backwards, one too_fast, one unreadable", h.Rejected)
	}

	// Without steal the estimate is the curve at the load, as before.
	plain, _ := NewEstimator(bentZone())
	plain.Advance(0.35, 10*time.Second)
	if s, _ := plain.Read(context.Background()); math.Abs(s[0].Joules-550) > 1e-9 {
		t.Errorf("no steal reader: %v J, want 550", s[0].Joules)
	}
	if _, ok := plain.StolenFraction(); ok {
		t.Error("an estimator without steal says it reads steal")
	}
	if err := plain.SetSteal((&fakeSteal{err: errors.New("no")}).read, 4, nil); err == nil {
		t.Error("an unreadable first steal reading accepted")
	}
}

// bigProcStat is a 96-vCPU VM's /proc/stat: 12.34 s stolen on the
// all-CPU line, a line per CPU and 4,000 interrupt counters.
func bigProcStat() string {
	var st strings.Builder
	st.WriteString("cpu  100 0 50 1000 0 0 0 1234 0 0\n")
	for i := range 96 {
		fmt.Fprintf(&st, "cpu%d 100 0 50 1000 0 0 0 99 0 0\n", i)
	}
	st.WriteString("intr 123" + strings.Repeat(" 7", 4000) + "\nctxt 0\nbtime 0\nprocesses 1\nprocs_running 1\nprocs_blocked 0\nsoftirq 1 0 0 0 0 0 0 0 0 0 0\n")
	return st.String()
}

// ProcStatSteal reads /proc/stat's steal column (USER_HZ ticks) from the
// first line only, whatever follows it (here 96 CPUs and 4,000 interrupt
// counters); a garbled, misplaced or out-of-range figure is an error, the
// last a rejected reading.
func TestProcStatSteal(t *testing.T) {
	root := t.TempDir()
	stat := bigProcStat()
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(root, "stat"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(stat)
	read, err := ProcStatSteal(root)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := read(); err != nil || v != 12340*time.Millisecond {
		t.Errorf("steal %v %v, want 12.34 s", v, err)
	}
	for name, bad := range map[string]string{
		"garbled":                strings.Replace(stat, "1234", "x", 1),
		"short line":             "cpu  100 0 50 1000 0 0 0\n",
		"per-CPU first":          "cpu0 100 0 50 1000 0 0 0 1234 0 0\n" + stat,
		"negative":               strings.Replace(stat, "1234", "-1234", 1),
		"no line end":            "cpu  100 0 50 1000 0 0 0 1234" + strings.Repeat(" 0", 300),
		"empty":                  "",
		"over, uint64's largest": strings.Replace(stat, "1234", "18446744073709551615", 1),
		"past uint64":            strings.Replace(stat, "1234", "18446744073709551616", 1),
		"over int64 ns":          strings.Replace(stat, "1234", "922337203686", 1),
	} {
		write(bad)
		v, err := read()
		if err == nil {
			t.Errorf("%s: read %v", name, v)
		}
		var rej *reading.Rejection
		if strings.HasPrefix(name, "over") != errors.As(err, &rej) {
			t.Errorf("%s: %v, a rejected reading only when over the range", name, err)
		}
	}
	if _, err := ProcStatSteal(t.TempDir()); err == nil {
		t.Error("a procfs without stat accepted")
	}
}

// On this machine's /proc, the first-line reader agrees with procfs's
// parse of the whole file, to the tick the two reads are apart.
func TestProcStatStealMatchesProcfs(t *testing.T) {
	read, err := ProcStatSteal("/proc")
	if err != nil {
		t.Fatal(err)
	}
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		st, err := fs.Stat()
		if err != nil {
			t.Fatal(err)
		}
		got, err := read()
		if err != nil {
			t.Fatal(err)
		}
		want := time.Duration(st.CPUTotal.Steal * 1e9)
		if d := got - want; d < 0 || d > time.Duration(runtime.NumCPU())*20*time.Millisecond {
			t.Errorf("steal %v, procfs %v", got, want)
		}
	}
}

// BenchmarkStealRead reads a 96-CPU VM's /proc/stat (4,000 interrupt
// counters) both ways: its first line, and procfs's parse of it all.
func BenchmarkStealRead(b *testing.B) {
	root := b.TempDir()
	if err := os.WriteFile(filepath.Join(root, "stat"), []byte(bigProcStat()), 0o644); err != nil {
		b.Fatal(err)
	}
	b.Run("first-line", func(b *testing.B) {
		read, err := ProcStatSteal(root)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := read(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("procfs", func(b *testing.B) {
		fs, err := procfs.NewFS(root)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := fs.Stat(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
