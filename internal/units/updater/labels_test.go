package updater

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/units"
)

// The exporter fills in a pod's namespace after the pod's first series:
// the counter goes on under the new labels (from its value, not from 0)
// and the old series stays, flat, for the exporter's retention. The pod's
// energy is the counter's true increase, not the old series' plus the
// new one's, whether the change falls between two cycles, within one, or
// before a fresh store's first window.
func TestLabelsFilledInLater(t *testing.T) {
	base := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Hour)
	at := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }
	labels := map[string]string{"__name__": "wattrace_pod_energy_joules_total", "pod_uid": "p-3", "pod": "web",
		"instance": "n1:9841", "job": "wattrace", "zone": "package", "source": "rapl", "method": "measured", "mode": "dynamic"}
	// The exporter's counter: 6 J before its first scrape, then 2 J/s
	// until 30 min, flat after.
	value := func(t time.Time) float64 {
		if t.After(at(30)) {
			t = at(30)
		}
		return 6 + 2*t.Sub(at(0)).Seconds()
	}
	var before, after series
	before.labels = labels
	after.labels = with(labels, "namespace", "shop")
	changed := at(10).Add(7 * time.Second)
	for ts := at(0); !ts.After(at(35)); ts = ts.Add(15 * time.Second) {
		if ts.Before(changed) {
			before.ts, before.vs = append(before.ts, ts.UnixMilli()), append(before.vs, value(ts))
			continue
		}
		if !ts.After(at(15)) { // retained, flat, for 5 min
			before.ts, before.vs = append(before.ts, ts.UnixMilli()), append(before.vs, value(changed.Add(-7*time.Second)))
		}
		after.ts, after.vs = append(after.ts, ts.UnixMilli()), append(after.vs, value(ts))
	}
	truth := value(at(35)) // 3,606 J: the counter counted from 0
	vm := testenv.StartVictoriaMetrics(t)
	vm.Import(t, append(before.jsonl(), after.jsonl()...))

	run := func(name string, lookback time.Duration, times []time.Time) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st, now, clock := clockedStore(t)
			u, err := New(newQuerier(t, vm.URL), st, Config{Cluster: "c1", Lookback: lookback, Delay: time.Second, Now: clock}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, *now = range times {
				if r := u.Cycle(ctx); r.Err != nil {
					t.Fatal(r.Err)
				}
			}
			p, err := st.Unit(ctx, units.Key{Cluster: "c1", Kind: units.KindPod, ID: "p-3"})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("pod: %v J, the counter grew by %v J", p.Figures.Joules(), truth)
			if got := p.Figures.Joules(); math.Abs(got-truth) > 0.01*truth || p.Project != "shop" {
				t.Errorf("pod: %v J in project %q; the counter grew by %v J (%.1f%% off), project shop", got, p.Project, truth, 100*(got-truth)/truth)
			}
		})
	}
	var everyMinute, everyFiveMinutes []time.Time
	for m := 1; m <= 45; m++ {
		everyMinute = append(everyMinute, at(m).Add(3*time.Second))
		if m%5 == 0 {
			everyFiveMinutes = append(everyFiveMinutes, at(m).Add(3*time.Second))
		}
	}
	run("a cycle a minute", 2*time.Minute, everyMinute)
	run("the change within a window", 5*time.Minute, everyFiveMinutes)
	run("a fresh store reads it all at once", time.Hour, []time.Time{at(45)})
}
