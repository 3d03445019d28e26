package stats

import (
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// A consumer's or workload's series of a zone series the zone left stays
// published for stats.retention, then leaves the snapshots as an ended
// workload's series do, so that a zone that changes source now and then
// does not add a series to every workload for good. The node's series
// stay. A zone that returns to the source later resumes the series where
// it was.
func TestLeftSeriesRetention(t *testing.T) {
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: -1, Source: "host:hv1", Method: reading.MethodMeasured}}}
	src := &fakeSource{}
	src.add(1, 100, 0, 0)
	ids := workload.NewResolver(workload.Options{EtcRoot: t.TempDir(), ProcRoot: t.TempDir()})
	l, err := New(Config{Interval: time.Second, Retention: 10 * time.Second, IdlePolicy: "none", CPUs: 1,
		IdleWatts: map[string]float64{"package": 0}}, src, m, names{1: "/system.slice/a.service"}, nil,
		WithWorkloads(ids, []ident.Kind{ident.KindSystemdUnit}))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	l.Step(now)
	step := func(sec int, j float64, source, method string) *snapshot.Snapshot {
		now = now.Add(time.Duration(sec) * time.Second)
		src.add(1, 100, 0, 1e8)
		m.samples[0].Joules += j
		m.samples[0].Source, m.samples[0].Method = source, method
		l.Step(now)
		return l.Snapshot()
	}
	host := snapshot.ZoneSeries{Zone: "package", Source: "host:hv1"}
	est := snapshot.ZoneSeries{Zone: "package", Source: "estimator", Estimated: true}
	type want struct {
		host, est   float64
		hasHost     bool
		nodeSeries  int
		description string
	}
	check := func(s *snapshot.Snapshot, w want) {
		t.Helper()
		var unit snapshot.Workload
		for _, u := range s.Workloads {
			if u.Level == string(ident.KindSystemdUnit) {
				unit = u
			}
		}
		for what, e := range map[string]snapshot.Energy{"cgroup": cgroupByPath(s, "/system.slice/a.service").Energy,
			"process": s.Processes[0].Energy, "unit": unit.Energy} {
			has := false
			for _, z := range e {
				has = has || z.Series() == host
			}
			if has != w.hasHost || e.Series(host).DynamicJ != w.host || e.Series(est).DynamicJ != w.est {
				t.Errorf("%s: %s: host series %v (published %v), estimator %v; want %v (%v), %v",
					w.description, what, e.Series(host).DynamicJ, has, e.Series(est).DynamicJ, w.host, w.hasHost, w.est)
			}
		}
		n := 0
		for _, z := range s.Zones {
			if z.Name == "package" {
				n++
			}
		}
		if n != w.nodeSeries {
			t.Errorf("%s: %d node package series, want %d", w.description, n, w.nodeSeries)
		}
	}
	check(step(1, 10, "host:hv1", reading.MethodMeasured), want{10, 0, true, 1, "measured"})
	check(step(1, 4, "estimator", reading.MethodEstimated), want{10, 4, true, 2, "the estimator stands in"})
	check(step(10, 5, "estimator", reading.MethodEstimated), want{10, 9, true, 2, "the retention after the change"})
	check(step(1, 1, "estimator", reading.MethodEstimated), want{0, 10, false, 2, "past the retention"})
	check(step(1, 0, "host:hv1", reading.MethodMeasured), want{10, 10, true, 2, "the host back (a fresh baseline)"})
	check(step(1, 6, "host:hv1", reading.MethodMeasured), want{16, 10, true, 2, "the host's series resumed"})
}
