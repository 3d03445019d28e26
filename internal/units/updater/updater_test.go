package updater

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/internal/units/store"
	"github.com/wattrace/wattrace/pkg/units"
)

// series is one synthetic exporter series.
type series struct {
	labels map[string]string
	ts     []int64
	vs     []float64
}

// increase is the reference: the sum of the series' increases, counting
// the first sample from 0, a drop as a reset to 0, and skipping samples
// validation refuses (negative).
func (s series) increase() float64 { return s.increaseUntil(math.MaxInt64) }

// increaseUntil is increase over the samples at or before limit (ms).
func (s series) increaseUntil(limit int64) float64 {
	var sum, prev float64
	had := false
	for i, v := range s.vs {
		if s.ts[i] > limit {
			break
		}
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		if had && v >= prev {
			sum += v - prev
		} else {
			sum += v
		}
		prev, had = v, true
	}
	return sum
}

func (s series) jsonl() []byte {
	b, _ := json.Marshal(map[string]any{"metric": s.labels, "values": s.vs, "timestamps": s.ts})
	return append(b, '\n')
}

// counter makes a series sampled every 15 s over [from, to], growing by
// rate per second while active (until activeTo), then flat (retained);
// resetAt (if not zero) restarts it from 0.
func counter(labels map[string]string, from, activeTo, to, resetAt time.Time, rate float64) series {
	s := series{labels: labels}
	v := 0.0
	for t := from; !t.After(to); t = t.Add(15 * time.Second) {
		if !resetAt.IsZero() && t.Equal(resetAt) {
			v = 0
		}
		if t.After(from) && !t.After(activeTo) {
			v += rate * 15
		} else if t.Equal(from) {
			v = rate * 3 // what the workload used before the first scrape
		}
		s.ts = append(s.ts, t.UnixMilli())
		s.vs = append(s.vs, v)
	}
	return s
}

func with(base map[string]string, kv ...string) map[string]string {
	m := map[string]string{}
	for k, v := range base {
		m[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// countingQuerier counts the queries sent to the TSDB.
type countingQuerier struct {
	Querier
	n atomic.Int64
}

func (c *countingQuerier) Query(ctx context.Context, q string, ts time.Time, opts ...v1.Option) (model.Value, v1.Warnings, v1.Infos, error) {
	c.n.Add(1)
	return c.Querier.Query(ctx, q, ts, opts...)
}

func newQuerier(t testing.TB, url string) *countingQuerier {
	c, err := api.NewClient(api.Config{Address: url})
	if err != nil {
		t.Fatal(err)
	}
	return &countingQuerier{Querier: v1.NewAPI(c)}
}

// clockedStore opens a store in t's directory whose clock, like the
// updater's (clock), reads *now, which the test sets; it closes when t
// ends.
func clockedStore(t *testing.T) (st *store.Store, now *time.Time, clock func() time.Time) {
	t.Helper()
	now = new(time.Time)
	clock = func() time.Time { return *now }
	st, err := store.Open(context.Background(), store.Config{Path: filepath.Join(t.TempDir(), "units.db"), Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st, now, clock
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

// TestUpdaterVictoriaMetrics drives the updater against a real
// VictoriaMetrics loaded with exporter-shaped series: two Slurm jobs (one
// on two nodes with an exporter restart on one), a pod, a negative sample;
// the TSDB goes down for a cycle, the server restarts, and a window is
// read twice. Every figure must equal the counters' exact increase.
func TestUpdaterVictoriaMetrics(t *testing.T) {
	sc := newScenario()
	vm := testenv.StartVictoriaMetrics(t)
	var body []byte
	for _, s := range sc.series {
		body = append(body, s.jsonl()...)
	}
	vm.Import(t, body)
	sc.exercise(t, vm.URL, vm.Stop, vm.Start)
}

// TestUpdaterPrometheus is the same against a real Prometheus whose
// storage was backfilled with the same series.
func TestUpdaterPrometheus(t *testing.T) {
	sc := newScenario()
	p := testenv.StartPrometheusBackfilled(t, openMetrics(sc.series))
	sc.exercise(t, p.URL, p.Stop, p.Start)
}

// openMetrics renders series as OpenMetrics text with timestamps, each
// series' samples together, as promtool's backfill wants.
func openMetrics(all []series) []byte {
	byName := map[string][]series{}
	var names []string
	for _, s := range all {
		n := s.labels["__name__"]
		if _, ok := byName[n]; !ok {
			names = append(names, n)
		}
		byName[n] = append(byName[n], s)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		for _, s := range byName[n] {
			var keys []string
			for k := range s.labels {
				if k != "__name__" {
					keys = append(keys, k)
				}
			}
			sort.Strings(keys)
			var ls []string
			for _, k := range keys {
				ls = append(ls, k+"="+strconv.Quote(s.labels[k]))
			}
			name := n + "{" + strings.Join(ls, ",") + "}"
			for i, v := range s.vs {
				fmt.Fprintf(&b, "%s %s %.3f\n", name, strconv.FormatFloat(v, 'g', -1, 64), float64(s.ts[i])/1000)
			}
		}
	}
	b.WriteString("# EOF\n")
	return []byte(b.String())
}

// scenario is the synthetic history both TSDBs are loaded with, and the
// figures it must yield.
type scenario struct {
	base    time.Time
	series  []series
	wants   map[string]*want
	podSeen int64
}

type want struct{ pkg, dram, cpu, grams, ioRead, netSent float64 }

func newScenario() *scenario {
	base := time.Now().UTC().Truncate(time.Minute).Add(-3 * time.Hour)
	at := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }

	job101 := map[string]string{"job_id": "101", "user": "alice", "uid": "1001"}
	job102 := map[string]string{"job_id": "102", "user": "bob", "uid": "1002"}
	pod := map[string]string{"pod_uid": "p-1", "pod": "web", "namespace": "shop", "qos": "burstable"}
	var all []series
	add := func(s series) series { all = append(all, s); return s }
	wants := map[string]*want{"101": {}, "102": {}, "p-1": {}}
	for _, node := range []string{"n1", "n2"} {
		l := with(job101, "instance", node+":9841", "slurm_node", node, "job", "wattrace")
		reset := time.Time{}
		if node == "n2" {
			reset = at(20) // the exporter on n2 restarts
		}
		for _, mode := range []string{"idle", "dynamic"} {
			s := add(counter(with(l, "__name__", "wattrace_job_energy_joules_total", "zone", "package", "source", "rapl", "method", "measured", "mode", mode), at(1), at(40), at(45), reset, 20))
			wants["101"].pkg += s.increase()
		}
		s := add(counter(with(l, "__name__", "wattrace_job_energy_joules_total", "zone", "dram", "source", "rapl", "method", "measured", "mode", "dynamic"), at(1), at(40), at(45), reset, 3))
		wants["101"].dram += s.increase()
		s = add(counter(with(l, "__name__", "wattrace_job_cpu_seconds_total"), at(1), at(40), at(45), reset, 1.5))
		wants["101"].cpu += s.increase()
		s = add(counter(with(l, "__name__", "wattrace_job_emissions_grams_total", "zone", "package", "mode", "dynamic", "provider", "constant"), at(1), at(40), at(45), reset, 0.002))
		wants["101"].grams += s.increase()
	}
	l := with(job102, "instance", "n1:9841", "slurm_node", "n1", "job", "wattrace")
	s := add(counter(with(l, "__name__", "wattrace_job_energy_joules_total", "zone", "package", "source", "rapl", "method", "measured", "mode", "dynamic"), at(5), at(12), at(17), time.Time{}, 7))
	wants["102"].pkg = s.increase()
	cpu := counter(with(l, "__name__", "wattrace_job_cpu_seconds_total"), at(5), at(12), at(17), time.Time{}, 0.5)
	cpu.vs[10] = -5 // a glitch validation must refuse
	add(cpu)
	wants["102"].cpu = cpu.increase()
	pl := with(pod, "instance", "n2:9841", "job", "wattrace")
	// The pod runs on; the last cycle (at 91 min, 1 s delay) reads up to here.
	podSeen := at(91).Add(-time.Second).UnixMilli()
	s = add(counter(with(pl, "__name__", "wattrace_pod_energy_joules_total", "zone", "package", "source", "estimator", "method", "estimated", "mode", "dynamic"), at(0), at(120), at(120), time.Time{}, 2))
	wants["p-1"].pkg = s.increaseUntil(podSeen)
	s = add(counter(with(pl, "__name__", "wattrace_pod_io_bytes_total", "device", "8:0", "op", "read"), at(0), at(120), at(120), time.Time{}, 4096))
	wants["p-1"].ioRead = s.increaseUntil(podSeen)
	s = add(counter(with(pl, "__name__", "wattrace_pod_network_payload_bytes_total", "protocol", "tcp", "direction", "sent"), at(0), at(120), at(120), time.Time{}, 1000))
	wants["p-1"].netSent = s.increaseUntil(podSeen)
	// Series of another exporter job the selector leaves out.
	add(counter(with(job101, "__name__", "wattrace_job_energy_joules_total", "instance", "x:1", "job", "other", "zone", "package", "method", "measured", "mode", "dynamic"), at(1), at(40), at(45), time.Time{}, 1e6))
	return &scenario{base: base, series: all, wants: wants, podSeen: podSeen}
}

// exercise runs the cycles against the loaded TSDB at url; stop and start
// take it down and back.
func (sc *scenario) exercise(t *testing.T, url string, stop, start func()) {
	r := &run{t: t, ctx: context.Background(), url: url, dbPath: filepath.Join(t.TempDir(), "units.db"), base: sc.base}
	r.now = r.at(0)
	r.open()
	r.cycles(1, 30)
	if un := r.unit("102"); un.Status != units.StatusFinal || un.State != store.StateEnded || !un.End.Equal(r.at(12)) || !un.Start.Equal(r.at(5)) {
		t.Errorf("job 102 after it ended: %+v", un)
	}
	if rej := r.u.Rejects()["negative"]; rej != 1 {
		t.Errorf("rejected negative samples %d, want 1", rej)
	}
	sc.tsdbDown(r, stop, start)
	// The server restarts mid-way.
	r.cycles(32, 35)
	r.st.Close()
	r.open()
	defer r.st.Close()
	for m := 36; m <= 50; m++ {
		r.now = r.at(m)
		res := r.cycle()
		if m == 36 && !res.Start.Equal(r.at(35).Add(-time.Second)) {
			t.Errorf("after the restart the window starts at %v, want the cursor %v", res.Start, r.at(35).Add(-time.Second))
		}
	}
	// A window read twice (the cursor set back, as a crash between a
	// read and its commit would leave a shorter one) counts nothing twice.
	r.setCursor(r.at(30))
	r.cycles(51, 91)
	for id, w := range sc.wants {
		r.check(id, w)
	}
	sc.checkUnits(r)
}

// tsdbDown: the TSDB goes down for a cycle (at 31 min), in which nothing
// is written but the status; then it is back.
func (sc *scenario) tsdbDown(r *run, stop, start func()) {
	t := r.t
	before := r.unit("101")
	stop()
	r.now = r.at(31)
	if res := r.u.Cycle(r.ctx); res.Err == nil {
		t.Fatal("a cycle with the TSDB down succeeded")
	}
	during := r.unit("101")
	if during.Status != units.StatusPending || during.Figures.Joules() != before.Figures.Joules() || during.Figures.Joules() == 0 {
		t.Errorf("job 101 while the TSDB is down: status %s, %v J (before %v J)", during.Status, during.Figures.Joules(), before.Figures.Joules())
	}
	if un := r.unit("102"); un.Status != units.StatusFinal || !near(un.Figures.Joules(), sc.wants["102"].pkg) {
		t.Errorf("final job 102 changed while the TSDB was down: %+v", un)
	}
	start()
}

// checkUnits: job 101 and the pod as the last cycle leaves them, and
// alice's usage equal to her unit.
func (sc *scenario) checkUnits(r *run) {
	t := r.t
	j := r.unit("101")
	if j.Status != units.StatusFinal || j.User != "alice" || len(j.Nodes) != 2 || j.Nodes[0] != "n1" || !j.End.Equal(r.at(40)) {
		t.Errorf("job 101 %+v", j)
	}
	if j.Figures.Energy[0].Method != "measured" {
		t.Errorf("job 101 energy method %+v", j.Figures.Energy)
	}
	p := r.unit("p-1")
	if p.Status != units.StatusRunning || p.Kind != units.KindPod || p.Name != "web" || p.Project != "shop" || p.Nodes[0] != "n2" {
		t.Errorf("pod %+v", p)
	}
	// Usage equals the units: alice's day.
	us, err := r.st.Usage(r.ctx, units.UsageQuery{From: sc.base.Add(-24 * time.Hour), To: sc.base.Add(24 * time.Hour), Users: []string{"alice"}})
	if err != nil || len(us) != 1 || !near(us[0].Figures.Joules(), j.Figures.Joules()) || us[0].Units != 1 {
		t.Errorf("alice's usage %+v %v", us, err)
	}
}

// run is one exercise of a scenario: its clock, and the store and
// updater it has open.
type run struct {
	t           *testing.T
	ctx         context.Context
	url, dbPath string
	base, now   time.Time
	st          *store.Store
	u           *Updater
	q           *countingQuerier
}

func (r *run) at(m int) time.Time { return r.base.Add(time.Duration(m) * time.Minute) }

// open opens the store and a new updater on it.
func (r *run) open() {
	clock := func() time.Time { return r.now }
	st, err := store.Open(context.Background(), store.Config{Path: r.dbPath, Now: clock})
	if err != nil {
		r.t.Fatal(err)
	}
	q := newQuerier(r.t, r.url)
	u, err := New(q, st, Config{Cluster: "c1", Selector: `job="wattrace"`, Lookback: 2 * time.Minute, Now: clock, Delay: time.Second}, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	r.st, r.u, r.q = st, u, q
}

func (r *run) unit(id string) units.Unit {
	r.t.Helper()
	un, err := r.st.Unit(r.ctx, units.Key{ID: id})
	if err != nil {
		r.t.Fatalf("unit %s: %v", id, err)
	}
	return un
}

// cycle runs one cycle, which must succeed with its six queries.
func (r *run) cycle() Result {
	r.t.Helper()
	before := r.q.n.Load()
	res := r.u.Cycle(r.ctx)
	if res.Err != nil {
		r.t.Fatalf("cycle at %v: %v", r.now, res.Err)
	}
	if n := r.q.n.Load() - before; n != 6 || res.Queries != 6 {
		r.t.Fatalf("cycle sent %d queries, want 6", n)
	}
	return res
}

// cycles runs a cycle at each minute from one to the other.
func (r *run) cycles(from, to int) {
	r.t.Helper()
	for m := from; m <= to; m++ {
		r.now = r.at(m)
		r.cycle()
	}
}

// setCursor sets the updater's cursor in the store's database.
func (r *run) setCursor(at time.Time) {
	db, err := sql.Open("sqlite", r.dbPath)
	if err != nil {
		r.t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("UPDATE cursors SET ms = ? WHERE name = ?", at.UnixMilli(), CursorName); err != nil {
		r.t.Fatal(err)
	}
}

// check: unit id's figures are what the scenario wants.
func (r *run) check(id string, w *want) {
	r.t.Helper()
	un := r.unit(id)
	var pkg, dram float64
	for _, e := range un.Figures.Energy {
		switch e.Zone {
		case "package":
			pkg += e.Joules
		case "dram":
			dram += e.Joules
		}
	}
	if !near(pkg, w.pkg) || !near(dram, w.dram) || !near(un.Figures.CPUSeconds, w.cpu) ||
		!near(un.Figures.Grams("constant"), w.grams) || !near(un.Figures.IOReadBytes, w.ioRead) || !near(un.Figures.NetSentBytes, w.netSent) {
		r.t.Errorf("unit %s figures %+v\nwant %+v", id, un.Figures, *w)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	if _, err := New(nil, nil, Config{}, nil); err == nil {
		t.Error("no error without a cluster")
	}
	if _, err := New(nil, nil, Config{Cluster: "c", Kinds: []units.Kind{"jobs"}}, nil); err == nil {
		t.Error("no error for an unknown kind")
	}
	if _, err := New(nil, nil, Config{Cluster: "c", Delay: -time.Second}, nil); err == nil {
		t.Error("no error for a negative delay")
	}
}
