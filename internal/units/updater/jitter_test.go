package updater

import (
	"context"
	"math"
	"regexp"
	"strconv"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/wattrace/wattrace/pkg/units"
)

// memQuerier answers the updater's range queries from series in memory:
// the samples in (ts − window, ts] of the series whose name the query's
// family matches.
type memQuerier struct{ series []series }

var queryShape = regexp.MustCompile(`_(\w+)"[^}]*}\[(\d+)ms\]$`)

func (q memQuerier) Query(_ context.Context, query string, ts time.Time, _ ...v1.Option) (model.Value, v1.Warnings, v1.Infos, error) {
	m := queryShape.FindStringSubmatch(query)
	window, _ := strconv.ParseInt(m[2], 10, 64)
	from, to := ts.UnixMilli()-window, ts.UnixMilli()
	out := model.Matrix{}
	for _, s := range q.series {
		name := s.labels["__name__"]
		if len(name) < len(m[1]) || name[len(name)-len(m[1]):] != m[1] {
			continue
		}
		ss := &model.SampleStream{Metric: model.Metric{}}
		for k, v := range s.labels {
			ss.Metric[model.LabelName(k)] = model.LabelValue(v)
		}
		for i, t := range s.ts {
			if t > from && t <= to {
				ss.Values = append(ss.Values, model.SamplePair{Timestamp: model.Time(t), Value: model.SampleValue(s.vs[i])})
			}
		}
		if len(ss.Values) > 0 {
			out = append(out, ss)
		}
	}
	return out, nil, nil, nil
}

// A TSDB may return a counter that stopped a unit in the last place below
// the value it returned before (VictoriaMetrics did, for two ended jobs,
// after a restart): the same value, not a reset that would count the
// whole counter again. A real reset, a drop to near 0, still counts from
// 0.
func TestLastDigitDropIsNoReset(t *testing.T) {
	base := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	job := func(id string, vs ...float64) series {
		s := series{labels: map[string]string{"__name__": "wattrace_job_energy_joules_total", "job_id": id,
			"instance": "n1:9841", "job": "wattrace", "zone": "package", "source": "rapl", "method": "measured", "mode": "dynamic"}}
		for i, v := range vs {
			s.ts = append(s.ts, base.Add(time.Duration(i)*15*time.Second).UnixMilli())
			s.vs = append(s.vs, v)
		}
		return s
	}
	const f = 7.632947204445
	below := math.Nextafter(f, 0) // 7.632947204444999
	q := memQuerier{series: []series{
		job("4", 1, 5, f, f, below, below, f, f),
		// A reset: the exporter restarted and the counter counts again.
		job("5", 1, 5, f, 0.5, 2),
	}}
	ctx := context.Background()
	st, now, clock := clockedStore(t)
	u, err := New(q, st, Config{Cluster: "c1", Lookback: 2 * time.Minute, Interval: time.Minute, Delay: time.Second, Now: clock}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// One cycle per sample, so that the drop comes in a window of its
	// own as well as within one.
	for i := 1; i <= 10; i++ {
		*now = base.Add(time.Duration(i)*15*time.Second + 2*time.Second)
		if r := u.Cycle(ctx); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	for _, c := range []struct {
		id   string
		want float64
	}{{"4", f}, {"5", f + 2}} {
		got, err := st.Unit(ctx, units.Key{Cluster: "c1", Kind: units.KindJob, ID: c.id})
		if err != nil {
			t.Fatal(err)
		}
		if j := got.Figures.Joules(); math.Abs(j-c.want) > 1e-9 {
			t.Errorf("job %s: %.12f J, want %.12f J", c.id, j, c.want)
		}
	}
}
