// Package updater discovers units from the exporters' workload series in a
// Prometheus-compatible TSDB (Prometheus, VictoriaMetrics, Thanos, Mimir)
// and counts their figures into the store.
//
// Each cycle reads the raw samples of the last window, (cursor, end], with
// one range-vector instant query per family for every unit and level at
// once (families below: six queries a cycle, whatever the number of
// units). From the samples it adds each series' exact increase: the
// difference to the series' previous sample, or the new value when the
// counter went down (a reset: the exporter restarted, so the counter
// counts again from 0), unless only by rounding in the TSDB (a drop of at
// most jitterTolerance of the value, which is no change). Increases are summed over the unit's series, so
// over its nodes. Nothing is extrapolated (as PromQL's increase() does)
// and no gauge is integrated.
//
// A series' first sample counts from 0: the workload counters start at 0
// when the exporter first sees the workload, so the first value is what
// the workload used until then. This also makes an updater that starts
// late (or after its store was lost) count a running unit's whole life,
// as far back as the counter goes. A series whose descriptive labels
// were filled in after the workload's first series (a pod's namespace) is
// the same counter: it continues from the kept sample of the series with
// the same identity (its labels less the descriptive ones), not from 0.
//
// The last sample of each series is kept in the store, in the same
// transaction as the figures and the cursor, so a restart neither loses
// nor counts anything twice. A unit seen in a window is running; an open
// unit with no sample for longer than a running one goes without (the
// longer of Interval and Delay, which exceeds the scrape interval) in
// successful windows has ended and its figures are final (the exporter
// keeps an ended workload's counters for its retention, so the last
// increase is counted before the series stop); a short window, such as
// the tail of a catch-up, ends nothing. A unit known only from a
// manager's metadata, with no series ever counted, stays pending. If
// a final unit's series come back (an exporter that was unreachable), it
// is reopened and counting goes on from the kept samples. When the TSDB
// can't be read, nothing is written but the running units' status, which
// becomes pending; the next successful cycle reads the whole gap (in steps
// of MaxWindow) and completes them.
package updater

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/units/store"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/units"
)

// Querier is the part of the Prometheus HTTP API client the updater uses.
type Querier interface {
	Query(ctx context.Context, query string, ts time.Time, opts ...v1.Option) (model.Value, v1.Warnings, v1.Infos, error)
}

var _ Querier = v1.API(nil)

// Store is what the updater needs of the units store.
type Store interface {
	Cursor(ctx context.Context, name string) (time.Time, bool, error)
	Open(ctx context.Context) ([]store.Tracked, error)
	Lookup(ctx context.Context, keys []units.Key) ([]store.Tracked, error)
	ApplyCycle(ctx context.Context, cursor string, at time.Time, obs []store.Observation) error
	MarkPending(ctx context.Context) (int64, error)
	PruneSeries(ctx context.Context, cutoff time.Time) (int64, error)
	Aliases(ctx context.Context, cluster string, kind units.Kind, aliases []string) (map[string]string, error)
}

var _ Store = (*store.Store)(nil)

// CursorName is the store cursor the updater keeps.
const CursorName = "tsdb"

// Config tunes the updater.
type Config struct {
	// Cluster names the units' cluster, unless ClusterLabel is set and
	// present on a series.
	Cluster      string
	ClusterLabel string
	// Kinds are the workload levels read (all when empty).
	Kinds []units.Kind
	// Selector is extra label matchers for every query, without braces
	// (`job="wattrace"`), e.g. to pick one exporter job.
	Selector string
	// Interval is the time between cycles.
	Interval time.Duration
	// Delay keeps the cycle's end this far behind now, so samples still
	// in flight (scrape interval, remote write, VictoriaMetrics's
	// -search.latencyOffset) have landed before a window is read: a
	// window is read once, so a sample stored after it is read is lost.
	Delay time.Duration
	// MaxWindow is the longest window one cycle reads; a longer gap (the
	// TSDB or the server was down) is caught up in several cycles.
	MaxWindow time.Duration
	// Lookback is the first cycle's window when the store has no cursor.
	Lookback time.Duration
	// SeriesRetention is how long the series state of final units is
	// kept, so a unit whose series return within it is not counted twice.
	SeriesRetention time.Duration
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
}

// Defaults for Config's durations.
const (
	DefaultInterval        = time.Minute
	DefaultDelay           = time.Minute
	DefaultMaxWindow       = time.Hour
	DefaultLookback        = 6 * time.Hour
	DefaultSeriesRetention = 24 * time.Hour
)

// family is one counter family of every workload level, or of GPU
// holders.
type family struct {
	name string // wattrace_<level>_<name>, or wattrace_gpu_<name> for holder
	add  func(f *units.Figures, m model.Metric, d float64)
	// holder: a family of the GPU allocations, one series per holder and
	// device, which names its holder by kind and id labels rather than by
	// a level prefix. Only Slurm jobs' (kind="slurm", job_id) are read:
	// a pod holder carries no pod_uid, its unit's id. Its series say
	// nothing of where the job ran (no slurm_node), so they add no node.
	holder bool
}

// holderKind is the holder kind of the GPU allocation series counted, and
// holderLevel the level its units are.
const (
	holderKind  = "slurm"
	holderLevel = units.KindJob
)

// families are the counters the updater reads. Energy and emissions are
// kept per zone (zones overlap, units.Figures.Joules picks the ones to
// sum); IO is summed over devices, network over protocols.
var families = []family{
	{name: "energy_joules_total", add: func(f *units.Figures, m model.Metric, d float64) {
		zone, method := string(m["zone"]), string(m["method"])
		for i := range f.Energy {
			if f.Energy[i].Zone == zone && f.Energy[i].Method == method {
				f.Energy[i].Joules += d
				return
			}
		}
		f.Energy = append(f.Energy, units.ZoneEnergy{Zone: zone, Method: method, Joules: d})
	}},
	{name: "emissions_grams_total", add: func(f *units.Figures, m model.Metric, d float64) {
		zone, provider := string(m["zone"]), string(m["provider"])
		for i := range f.Emissions {
			if f.Emissions[i].Zone == zone && f.Emissions[i].Provider == provider {
				f.Emissions[i].Grams += d
				return
			}
		}
		f.Emissions = append(f.Emissions, units.Emission{Zone: zone, Provider: provider, Grams: d})
	}},
	{name: "cpu_seconds_total", add: func(f *units.Figures, _ model.Metric, d float64) { f.CPUSeconds += d }},
	{name: "io_bytes_total", add: func(f *units.Figures, m model.Metric, d float64) {
		switch m["op"] {
		case "read":
			f.IOReadBytes += d
		case "write":
			f.IOWriteBytes += d
		}
	}},
	{name: "network_payload_bytes_total", add: func(f *units.Figures, m model.Metric, d float64) {
		switch m["direction"] {
		case "sent":
			f.NetSentBytes += d
		case "received":
			f.NetReceivedBytes += d
		}
	}},
	// Summed over the job's GPUs (and MIG instances), as GPUSeconds is.
	{name: "allocation_idle_seconds_total", add: func(f *units.Figures, _ model.Metric, d float64) { f.GPUIdleSeconds += d }, holder: true},
}

// level says how a workload level's series name their unit.
type level struct {
	kind    units.Kind
	id      model.LabelName // the unit's id
	name    model.LabelName // its display name ("" = none)
	user    model.LabelName
	project model.LabelName
	node    model.LabelName // where it ran, before instance
	// alias names the unit where its id label is empty: a Slurm job's
	// sluid, when the exporter found the job's cgroup named by its SLUID
	// and not (yet) its numeric id. Such series count into the job the
	// store knows the alias of (from Slurm's metadata), else into a unit
	// keyed by the alias, which the store folds into the job once Slurm
	// names it.
	alias model.LabelName
}

// levels follow pkg/workload's label names (docs/metrics.md).
var levels = []level{
	{kind: units.KindContainer, id: "container_id", name: "container", project: "namespace"},
	{kind: units.KindPod, id: "pod_uid", name: "pod", project: "namespace"},
	{kind: units.KindVM, id: "vm_uuid", name: "vm"},
	{kind: units.KindJob, id: "job_id", user: "user", node: "slurm_node", alias: "sluid"},
	{kind: units.KindSystemdUnit, id: "unit", name: "unit"},
	{kind: units.KindPBSJob, id: "job_id", user: "user"},
}

// Updater runs update cycles.
type Updater struct {
	q       Querier
	s       Store
	c       Config
	log     *zap.Logger
	rejects *reading.Rejects
	levels  map[string]level // by the level's name in the family

	mu    sync.Mutex
	last  Result
	stats Stats
}

// Stats are the updater's counters since it started, for its own metrics.
type Stats struct {
	Cycles, Failures, Queries, Samples, Rejected int64
	// LastSuccess is the end of the latest window recorded.
	LastSuccess time.Time
	// LastDuration is how long the latest cycle took.
	LastDuration time.Duration
}

// Stats returns the counters so far.
func (u *Updater) Stats() Stats {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.stats
}

// New builds an updater; c's zero durations take the defaults.
func New(q Querier, s Store, c Config, log *zap.Logger) (*Updater, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if c.Cluster == "" {
		return nil, errors.New("updater: a cluster name is required")
	}
	for _, d := range []*time.Duration{&c.Interval, &c.Delay, &c.MaxWindow, &c.Lookback, &c.SeriesRetention} {
		if *d < 0 {
			return nil, fmt.Errorf("updater: negative duration %v", *d)
		}
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Interval, DefaultInterval)
	def(&c.MaxWindow, DefaultMaxWindow)
	def(&c.Lookback, DefaultLookback)
	def(&c.SeriesRetention, DefaultSeriesRetention)
	if c.Now == nil {
		c.Now = time.Now
	}
	u := &Updater{q: q, s: s, c: c, log: log, rejects: reading.NewRejects("tsdb", log), levels: map[string]level{}}
	kinds := map[units.Kind]bool{}
	for _, k := range c.Kinds {
		if !k.Valid() {
			return nil, fmt.Errorf("updater: unknown kind %q", k)
		}
		kinds[k] = true
	}
	for _, l := range levels {
		if len(kinds) == 0 || kinds[l.kind] {
			u.levels[string(l.kind)] = l
		}
	}
	return u, nil
}

// Result says what a cycle did.
type Result struct {
	// Start and End bound the window read: (Start, End].
	Start, End time.Time
	Queries    int
	Series     int
	Samples    int
	// Rejected samples failed validation (not finite, negative).
	Rejected int
	// Running, Ended and New count units seen this cycle, units that
	// became final, and units the store did not know.
	Running, Ended, New int
	Duration            time.Duration
	// CaughtUp is false when the window stopped at MaxWindow before now.
	CaughtUp bool
	Err      error
}

// Last returns the latest cycle's result.
func (u *Updater) Last() Result {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last
}

// Rejects is the tally of samples refused by validation.
func (u *Updater) Rejects() map[string]uint64 { return u.rejects.Counts() }

// Run runs cycles every Interval (at once when catching up) until ctx ends.
func (u *Updater) Run(ctx context.Context) error {
	lastPrune := time.Time{}
	for {
		r := u.Cycle(ctx)
		if r.Err != nil && ctx.Err() == nil {
			u.log.Warn("units update cycle failed; running units are pending until the TSDB answers", zap.Error(r.Err))
		} else if r.Err == nil {
			u.log.Debug("units update cycle", zap.Time("end", r.End), zap.Int("queries", r.Queries),
				zap.Int("series", r.Series), zap.Int("running", r.Running), zap.Int("ended", r.Ended),
				zap.Duration("took", r.Duration))
		}
		if now := u.c.Now(); now.Sub(lastPrune) > time.Hour {
			lastPrune = now
			if n, err := u.s.PruneSeries(ctx, now.Add(-u.c.SeriesRetention)); err != nil {
				u.log.Warn("pruning series state", zap.Error(err))
			} else if n > 0 {
				u.log.Debug("pruned series state", zap.Int64("units", n))
			}
		}
		wait := u.c.Interval
		if r.Err == nil && !r.CaughtUp {
			wait = 0
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// Cycle reads one window and records it.
func (u *Updater) Cycle(ctx context.Context) (r Result) {
	began := time.Now()
	defer func() {
		r.Duration = time.Since(began)
		u.mu.Lock()
		u.last = r
		u.stats.Cycles++
		u.stats.Queries += int64(r.Queries)
		u.stats.Samples += int64(r.Samples)
		u.stats.Rejected += int64(r.Rejected)
		u.stats.LastDuration = r.Duration
		if r.Err != nil {
			u.stats.Failures++
		} else {
			u.stats.LastSuccess = r.End
		}
		u.mu.Unlock()
	}()
	end := u.c.Now().Add(-u.c.Delay).Truncate(time.Millisecond)
	start, ok, err := u.s.Cursor(ctx, CursorName)
	if err != nil {
		r.Err = err
		return r
	}
	if !ok {
		start = end.Add(-u.c.Lookback)
	}
	r.CaughtUp = true
	if end.Sub(start) > u.c.MaxWindow {
		end = start.Add(u.c.MaxWindow)
		r.CaughtUp = false
	}
	r.Start, r.End = start, end
	if !end.After(start) {
		return r
	}
	streams, err := u.query(ctx, end, end.Sub(start), &r)
	if err != nil {
		r.Err = err
		if _, perr := u.s.MarkPending(ctx); perr != nil {
			r.Err = errors.Join(err, perr)
		}
		return r
	}
	obs, err := u.observe(ctx, streams, start, end, &r)
	if err != nil {
		r.Err = err
		return r
	}
	if err := u.s.ApplyCycle(ctx, CursorName, end, obs); err != nil {
		r.Err = err
	}
	return r
}

// stream is one series' samples with the family it belongs to.
type stream struct {
	fam    *family
	lvl    level
	series *model.SampleStream
	// id is the fingerprint of every label, ident of the labels that
	// name the counter (identity).
	id, ident string
}

// descriptive are labels that describe a workload without naming its
// counter, which the exporter may fill in after the workload's first
// series (enrichment answers later: a pod's namespace and name, a job's
// user): the series under the new labels goes on from the same counter.
// Every other label (the unit's id, the exporter's instance and job, the
// node, zone, mode, source, method, provider, device, op, protocol,
// direction, a cluster label, external labels) names the counter: series
// that differ in one of them are different counters and are never
// merged.
var descriptive = map[model.LabelName]bool{
	"namespace": true, "pod": true, "container": true, "vm": true,
	"qos": true, "user": true, "uid": true,
	// A job's sluid where its cgroup is named by its numeric id
	// (CgroupJobIdPaths=yes): the exporter finds it with the owner.
	"sluid": true,
}

// identity is the fingerprint of m's labels less the descriptive ones.
func identity(m model.Metric) string {
	ls := make(model.LabelSet, len(m))
	for k, v := range m {
		if !descriptive[k] {
			ls[k] = v
		}
	}
	return ls.Fingerprint().String()
}

// successor is where a series new to a unit's state starts: the newest
// kept sample of a series with the same identity (the same counter under
// labels filled in since), or nothing (count from 0). Only the value is
// taken: the new series' own samples are all new to it, even those at or
// before the other's last (both exported while the old one is retained).
func successor(kept map[string]store.SeriesState, ident string) (store.SeriesState, bool) {
	var best store.SeriesState
	found := false
	for _, s := range kept {
		if s.I == ident && (!found || s.T > best.T) {
			best, found = s, true
		}
	}
	return store.SeriesState{V: best.V}, found
}

// query sends one range query per family, in parallel.
func (u *Updater) query(ctx context.Context, end time.Time, window time.Duration, r *Result) ([]stream, error) {
	names := make([]string, 0, len(u.levels))
	for n := range u.levels {
		names = append(names, n)
	}
	sort.Strings(names)
	sel := ""
	if u.c.Selector != "" {
		sel = "," + u.c.Selector
	}
	type answer struct {
		streams []stream
		err     error
	}
	answers := make([]answer, len(families))
	holderLvl, holders := u.levels[string(holderLevel)]
	var wg sync.WaitGroup
	for i := range families {
		fam := &families[i]
		q := fmt.Sprintf(`{__name__=~"wattrace_(%s)_%s"%s}[%dms]`, strings.Join(names, "|"), fam.name, sel, window.Milliseconds())
		if fam.holder {
			if !holders {
				continue
			}
			q = fmt.Sprintf(`{__name__="wattrace_gpu_%s",kind=%q%s}[%dms]`, fam.name, holderKind, sel, window.Milliseconds())
		}
		r.Queries++
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, warnings, _, err := u.q.Query(ctx, q, end)
			if err != nil {
				answers[i].err = fmt.Errorf("query %s: %w", q, err)
				return
			}
			for _, w := range warnings {
				u.log.Warn("TSDB warning", zap.String("query", q), zap.String("warning", w))
			}
			m, ok := v.(model.Matrix)
			if !ok {
				answers[i].err = fmt.Errorf("query %s: a %s, not a range vector", q, v.Type())
				return
			}
			prefix, suffix := "wattrace_", "_"+fam.name
			for _, ss := range m {
				if fam.holder {
					if ss.Metric["kind"] == holderKind && ss.Metric[holderLvl.id] != "" {
						answers[i].streams = append(answers[i].streams, stream{fam: fam, lvl: holderLvl, series: ss})
					}
					continue
				}
				name := string(ss.Metric[model.MetricNameLabel])
				lvl, ok := u.levels[strings.TrimSuffix(strings.TrimPrefix(name, prefix), suffix)]
				if !ok || (ss.Metric[lvl.id] == "" && aliasOf(lvl, ss.Metric) == "") {
					continue
				}
				answers[i].streams = append(answers[i].streams, stream{fam: fam, lvl: lvl, series: ss})
			}
		}()
	}
	wg.Wait()
	var out []stream
	var errs []error
	for _, a := range answers {
		out = append(out, a.streams...)
		if a.err != nil {
			errs = append(errs, a.err)
		}
	}
	return out, errors.Join(errs...)
}

// acc is one unit's observation being built.
type acc struct {
	obs   store.Observation
	nodes map[string]bool
	// fresh: a sample newer than those counted before was seen, so the
	// unit's series are still exported.
	fresh bool
}

// observe turns the window's samples into observations: increases for
// the units seen, final for the open units not seen.
func (u *Updater) observe(ctx context.Context, streams []stream, start, end time.Time, r *Result) ([]store.Observation, error) {
	open, err := u.s.Open(ctx)
	if err != nil {
		return nil, err
	}
	known := make(map[units.Key]store.Tracked, len(open))
	for _, t := range open {
		known[t.Key] = t
	}
	aliases, err := u.aliases(ctx, streams)
	if err != nil {
		return nil, err
	}
	keys, seen, err := u.seen(ctx, streams, aliases, known, r)
	if err != nil {
		return nil, err
	}
	startMs := start.UnixMilli()
	for _, i := range countOrder(streams) {
		st, k := streams[i], keys[i]
		a := seen[k]
		if a.obs.Series == nil {
			a.obs.Key = k
			a.obs.Status = units.StatusRunning
			a.obs.Series = map[string]store.SeriesState{}
			for id, s := range known[k].Series {
				a.obs.Series[id] = s
			}
		}
		u.count(a, st, startMs, r)
	}
	out := make([]store.Observation, 0, len(seen)+len(open))
	for _, a := range seen {
		if !a.fresh {
			continue // only samples counted before: nothing new
		}
		for n := range a.nodes {
			a.obs.Nodes = append(a.obs.Nodes, n)
		}
		sort.Strings(a.obs.Nodes)
		out = append(out, a.obs)
		r.Running++
	}
	out = append(out, u.ended(open, seen, end, r)...)
	// A fixed order: the store's writes (and their locks) in key order.
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Key, out[j].Key
		if a.Cluster != b.Cluster {
			return a.Cluster < b.Cluster
		}
		if a.Kind != b.Kind {
			return a.Kind < b.Kind
		}
		return a.ID < b.ID
	})
	return out, nil
}

// seen keys each stream by its unit and starts an observation per unit;
// units seen now that are not open (new, or final ones come back) are
// looked up in the store and added to known.
func (u *Updater) seen(ctx context.Context, streams []stream, aliases map[units.Key]string, known map[units.Key]store.Tracked, r *Result) ([]units.Key, map[units.Key]*acc, error) {
	var missing []units.Key
	seen := map[units.Key]*acc{}
	keys := make([]units.Key, len(streams))
	for i, st := range streams {
		k := u.key(st, aliases)
		keys[i] = k
		if _, ok := seen[k]; ok {
			continue
		}
		seen[k] = &acc{nodes: map[string]bool{}}
		if _, ok := known[k]; !ok {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		found, err := u.s.Lookup(ctx, missing)
		if err != nil {
			return nil, nil, err
		}
		for _, t := range found {
			known[t.Key] = t
		}
		r.New = len(missing) - len(found)
	}
	return keys, seen, nil
}

// countOrder sets each stream's id and identity and returns the order to
// count them in: series of one counter (the same identity) in the order
// they began, so that one whose labels were filled in later continues
// from the one before it, counted first.
func countOrder(streams []stream) []int {
	firstTs := func(st stream) int64 {
		if len(st.series.Values) == 0 {
			return 0
		}
		return int64(st.series.Values[0].Timestamp)
	}
	for i := range streams {
		streams[i].id = streams[i].series.Metric.Fingerprint().String()
		streams[i].ident = identity(streams[i].series.Metric)
	}
	order := make([]int, len(streams))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(x, y int) bool {
		a, b := streams[order[x]], streams[order[y]]
		if a.ident != b.ident {
			return a.ident < b.ident
		}
		return firstTs(a) < firstTs(b)
	})
	return order
}

// count adds one stream's samples after startMs to its unit's
// observation.
func (u *Updater) count(a *acc, st stream, startMs int64, r *Result) {
	m := st.series.Metric
	if a.obs.Name == "" && st.lvl.name != "" {
		a.obs.Name = string(m[st.lvl.name])
	}
	if a.obs.User == "" && st.lvl.user != "" {
		a.obs.User = string(m[st.lvl.user])
	}
	if a.obs.Project == "" && st.lvl.project != "" {
		a.obs.Project = string(m[st.lvl.project])
	}
	id := st.id
	prev, had := a.obs.Series[id]
	if !had {
		prev, had = successor(a.obs.Series, st.ident)
	}
	counted := false
	r.Series++
	for _, sp := range st.series.Values {
		r.Samples++
		ts := int64(sp.Timestamp)
		// A sample at or before the window's start or the kept one was
		// counted already (overlapping reads after a crash).
		if ts <= startMs || (had && ts <= prev.T) {
			continue
		}
		v := float64(sp.Value)
		if err := reading.CheckGauge(v, 0); err != nil {
			u.rejects.Add(err, string(m[model.MetricNameLabel])+" "+m.String())
			r.Rejected++
			continue
		}
		d := v // first sample, or a reset: the counter counts from 0
		switch {
		case had && v >= prev.V:
			d = v - prev.V
		case had && jitter(prev.V, v):
			// The same value, a last digit off: not a reset.
			d, v = 0, prev.V
		}
		if d > 0 {
			st.fam.add(&a.obs.Delta, m, d)
		}
		first := !had
		prev, had, counted = store.SeriesState{V: v, T: ts, I: st.ident}, true, true
		a.fresh = true
		// First and Last follow the samples that show activity (a
		// series' first, or a counter that grew): an ended workload's
		// counters stay exported, unchanged, for the exporter's
		// retention, which must not stretch its end.
		if !first && d <= 0 {
			continue
		}
		t := sp.Timestamp.Time().UTC()
		if a.obs.First.IsZero() || t.Before(a.obs.First) {
			a.obs.First = t
		}
		if t.After(a.obs.Last) {
			a.obs.Last = t
		}
	}
	if counted {
		a.obs.Series[id] = prev
		if n := u.node(st); n != "" && !st.fam.holder {
			a.nodes[n] = true
		}
	}
}

// jitterTolerance is the largest drop, relative to the counter, that is
// read as the same value rather than a reset. A TSDB may return a value a
// unit in the last place off what it stored: VictoriaMetrics keeps
// values as decimals and gave 7.632947204444999 for a counter it had
// returned as 7.632947204445, once the series' data had been rewritten
// after a restart. Read as a reset, that drop counted the whole counter
// again. A real reset starts the counter again from 0, far below 1e-9
// of where it was.
const jitterTolerance = 1e-9

// jitter reports whether v, below prev, is prev up to rounding.
func jitter(prev, v float64) bool {
	return v < prev && prev-v <= jitterTolerance*prev
}

// ended returns the observations of the open units that the window did
// not see counting: final when they have been quiet for longer than a
// running unit can be, running again when a pending one was sampled
// recently.
func (u *Updater) ended(open []store.Tracked, seen map[units.Key]*acc, end time.Time, r *Result) []store.Observation {
	var out []store.Observation
	// A running unit has a sample at least every scrape interval, which
	// updater.delay must exceed, and normally one every cycle; a window
	// can be shorter than that (the tail of a catch-up read in steps of
	// MaxWindow), so an empty window alone does not end a unit.
	quiet := max(u.c.Interval, u.c.Delay).Milliseconds()
	for _, t := range open {
		if a := seen[t.Key]; a != nil && a.fresh {
			continue
		}
		if len(t.Series) == 0 {
			// Known from a manager's metadata (Slurm) only: no series
			// was ever counted, so nothing says its figures are
			// complete. It stays pending, never final with zeros.
			continue
		}
		if lastSample(t.Series) > end.UnixMilli()-quiet {
			// Sampled more recently than a running unit can go
			// without a sample: still running. A unit pending since
			// the TSDB failed is running again, its figures current.
			if t.Status == units.StatusPending {
				out = append(out, store.Observation{Key: t.Key, Status: units.StatusRunning})
				r.Running++
			}
			continue
		}
		// Open, and no new sample for longer than a running unit goes
		// without one, in windows the TSDB answered: its series have
		// stopped, every sample is counted.
		out = append(out, store.Observation{Key: t.Key, Status: units.StatusFinal})
		r.Ended++
	}
	return out
}

// lastSample is the time (Unix ms) of the newest sample counted into a
// unit.
func lastSample(series map[string]store.SeriesState) int64 {
	var last int64
	for _, s := range series {
		last = max(last, s.T)
	}
	return last
}

func (u *Updater) key(st stream, aliases map[units.Key]string) units.Key {
	k := units.Key{Cluster: u.cluster(st.series.Metric), Kind: st.lvl.kind, ID: string(st.series.Metric[st.lvl.id])}
	if k.ID == "" {
		k.ID = aliasOf(st.lvl, st.series.Metric)
		if id, ok := aliases[k]; ok {
			k.ID = id
		}
	}
	return k
}

func (u *Updater) cluster(m model.Metric) string {
	if u.c.ClusterLabel != "" {
		if c := m[model.LabelName(u.c.ClusterLabel)]; c != "" {
			return string(c)
		}
	}
	return u.c.Cluster
}

// aliasOf is the alias a series names its unit by when its id label is
// empty, "" when it has none or one that is not a SLUID (a value from
// outside, which becomes a unit id).
func aliasOf(lvl level, m model.Metric) string {
	if lvl.alias == "" || m[lvl.id] != "" {
		return ""
	}
	a := string(m[lvl.alias])
	if !units.ValidSLUID(a) {
		return ""
	}
	return a
}

// aliases asks the store which units the window's aliases name, keyed by
// the alias's own key.
func (u *Updater) aliases(ctx context.Context, streams []stream) (map[units.Key]string, error) {
	type group struct {
		cluster string
		kind    units.Kind
	}
	ask := map[group][]string{}
	seen := map[units.Key]bool{}
	for _, st := range streams {
		a := aliasOf(st.lvl, st.series.Metric)
		if a == "" {
			continue
		}
		k := units.Key{Cluster: u.cluster(st.series.Metric), Kind: st.lvl.kind, ID: a}
		if !seen[k] {
			seen[k] = true
			g := group{k.Cluster, k.Kind}
			ask[g] = append(ask[g], a)
		}
	}
	out := map[units.Key]string{}
	for g, as := range ask {
		m, err := u.s.Aliases(ctx, g.cluster, g.kind, as)
		if err != nil {
			return nil, err
		}
		for a, id := range m {
			out[units.Key{Cluster: g.cluster, Kind: g.kind, ID: a}] = id
		}
	}
	return out, nil
}

// node is where the series was exported: the level's own node label
// (Slurm's node name) or the scrape target's host.
func (u *Updater) node(st stream) string {
	m := st.series.Metric
	if st.lvl.node != "" && m[st.lvl.node] != "" {
		return string(m[st.lvl.node])
	}
	inst := string(m["instance"])
	if h, _, err := net.SplitHostPort(inst); err == nil {
		return h
	}
	return inst
}
