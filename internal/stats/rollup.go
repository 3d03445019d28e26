package stats

import (
	"errors"
	"io/fs"
	"path"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// WorkloadResolver names the workload that owns a cgroup path;
// *workload.Resolver implements it. Resolve must be cheap on a cached path:
// it runs for every cgroup each interval.
type WorkloadResolver interface {
	Resolve(path string) ident.Identity
	Sweep() int
}

// ResourceReader reads a cgroup's resource counters;
// *cgroupstats.Reader implements it.
type ResourceReader interface {
	ReadInto(rel string, s *reading.Resources) error
}

// WithWorkloads rolls cgroups up into the workloads that own them at the
// given levels (containers, pods, VMs, jobs, systemd units).
func WithWorkloads(ids WorkloadResolver, levels []ident.Kind) Option {
	return func(o *parts) { o.ids, o.levels = ids, levels }
}

// WithResources makes each workload's cgroup resource counters (CPU,
// memory, IO, pressure, tasks) readable from the snapshots; it needs
// WithWorkloads. They are read when a scrape asks, at most once per
// snapshot (Snapshot.WorkloadResources), never on the loop's timer. A
// reading is exported by the snapshot it was read for and by up to
// staleScrapes more (collector.resources.stale-scrapes), each workload's
// files read again when its reading would grow older: see
// resourceCache.
func WithResources(r ResourceReader, staleScrapes int) Option {
	return func(o *parts) { o.resources, o.staleScrapes = r, staleScrapes }
}

// workloadState is the loop's state of one workload: who it is (u; its
// additive fields are published from f) and its cumulative figures.
type workloadState struct {
	u    snapshot.Workload
	f    figures
	seen bool
	// root is the workload's top cgroup: the highest ancestor of its
	// cgroups that still belongs to it (a job's job_N, a pod's pod slice).
	root string
	key  string
}

func (u *workloadState) liveness() (bool, bool, time.Time) { return u.u.Alive, u.seen, u.u.LastSeen }

// rollup is the stage that sums cgroups into the workloads that own them
// (containers, pods, VMs, Slurm jobs, systemd units). Counters are kept in
// the workload itself, so they never go backwards when one of its cgroups
// leaves the snapshot before the others.
type rollup struct {
	phases
	ids       WorkloadResolver
	levels    []ident.Kind
	led       consumers
	credits   *credits
	retention time.Duration
	resources *resourceCache
	byKey     map[string]*workloadState
	log       *zap.Logger
	// passed is, per cgroup, what of its figures the workloads already
	// have.
	passed map[*consumer]*figures
	// growth is add's scratch: one cgroup's growth, added into its
	// workloads' own figures and then dropped (reused, not allocated per
	// cgroup per step).
	growth figures
}

// workloadCredit is the roll-up's view for stages that pay workloads.
type workloadCredit interface {
	// credit adds energy to the workload at level whose labels include
	// match; false when no workload of this interval matches.
	credit(level ident.Kind, match map[string]string, s snapshot.ZoneSeries, dynamicJ, idleJ float64) bool
}

func makeRollup(d *deps) (stage, error) {
	if d.opts.ids == nil {
		return nil, nil
	}
	r := &rollup{ids: d.opts.ids, levels: d.opts.levels, led: d.consumers, credits: d.credits,
		retention: d.cfg.Retention, log: d.log,
		byKey: map[string]*workloadState{}, passed: map[*consumer]*figures{}}
	if d.opts.resources != nil {
		r.resources = newResourceCache(d.opts.resources, d.opts.staleScrapes)
		r.resources.log = d.log
	}
	return r, nil
}

func (r *rollup) settle(iv *interval) {
	// What a merged-away cgroup already passed on to its workloads moves
	// along, so the roll-up doesn't pass it on twice. A placeholder (an id
	// not yet resolved) belonged to no workload: what it "passed on" went
	// nowhere, so the workloads get it now, through its target's growth.
	for _, m := range r.led.merges() {
		old := r.passed[m.old]
		if old == nil {
			continue
		}
		if !strings.HasPrefix(m.old.w.Cgroup, "id:") {
			into := r.passed[m.into]
			if into == nil {
				into = &figures{}
				r.passed[m.into] = into
			}
			into.add(old)
		}
		delete(r.passed, m.old)
	}
	for w := range r.passed {
		if w.gone {
			delete(r.passed, w)
		}
	}
	r.add(iv.now)
}

// add adds each cgroup's growth since the last interval to the workloads
// that own it at every enabled level.
func (r *rollup) add(now time.Time) {
	for _, u := range r.byKey {
		u.seen, u.u.Alive, u.u.Cgroups = false, false, 0
	}
	for w := range r.led.cgroups() {
		id := r.ids.Resolve(w.w.Cgroup)
		passed := r.passed[w]
		if passed == nil {
			passed = &figures{}
			r.passed[w] = passed
		}
		w.f.growth(passed, &r.growth)
		w.f.keep(passed)
		w.w.InWorkload = false
		for _, level := range r.levels {
			vals, ok := id.LabelValues(level)
			if !ok {
				continue
			}
			w.w.InWorkload = true
			key := workloadKey(level, vals)
			u := r.byKey[key]
			if u == nil {
				u = &workloadState{u: snapshot.Workload{Level: string(level), LastSeen: now}, key: key}
				r.byKey[key] = u
			}
			// Names filled in by enrichment replace the blanks they
			// had while the workload was first seen.
			u.u.Labels = vals
			u.u.Manager = ident.ManagerAt(level, id)
			u.f.add(&r.growth)
			u.seen = true
			if w.w.Alive {
				u.u.Alive = true
				u.u.Cgroups++
				u.u.LastSeen = now
			}
			if u.root == "" || len(w.w.Cgroup) < len(u.root) {
				u.root = r.rootOf(w.w.Cgroup, level, key)
			}
		}
	}
	r.ids.Sweep()
}

// credit adds energy to the workload at level whose labels include match
// (the GPU stage pays an allocation holder's idle, or a passed-through
// GPU's whole energy, to its job, pod or VM), through credits, so the
// same joules are priced. It returns false when no workload takes it:
// that energy stays where the caller keeps it.
func (r *rollup) credit(level ident.Kind, match map[string]string, s snapshot.ZoneSeries, dynamicJ, idleJ float64) bool {
	names := ident.LabelNames(level)
	for _, u := range r.byKey {
		if u.u.Level != string(level) || !u.seen {
			continue
		}
		ok := true
		for i, n := range names {
			if want, has := match[n]; has && (i >= len(u.u.Labels) || u.u.Labels[i] != want || want == "") {
				ok = false
				break
			}
		}
		if ok {
			r.credits.workload(&u.f, s, dynamicJ, idleJ)
			return true
		}
	}
	return false
}

// rootOf climbs from a workload's cgroup to the highest ancestor that still
// belongs to the same workload at that level.
func (r *rollup) rootOf(p string, level ident.Kind, key string) string {
	for p != "/" && p != "" {
		parent := path.Dir(p)
		vals, ok := r.ids.Resolve(parent).LabelValues(level)
		if !ok || workloadKey(level, vals) != key {
			break
		}
		p = parent
	}
	return p
}

// resourceCache reads workloads' resource counters for the snapshots, on
// demand, and keeps each workload's last reading so that the scrapes of a
// workload whose cgroup is gone see its final values during retention.
// Fills of several snapshots may run concurrently (scrapes), hence the lock.
//
// A live workload's reading is also exported by up to stale later fills
// (collector.resources.stale-scrapes) before its files are read again:
// reading 200 Slurm jobs' five memory files was a third of the exporter's
// CPU at a 15 s scrape, and a gauge sampled one scrape late is still a
// sample of it. The workloads' reads are spread evenly over the fills (a
// new workload's first reading is reused 0 to stale times, in turn), so
// each scrape reads about 1/(stale+1) of them rather than all of them
// every stale+1 scrapes. A workload whose top cgroup changed is read at
// once.
type resourceCache struct {
	r     ResourceReader
	stale uint64
	log   *zap.Logger
	mu    sync.Mutex
	fills uint64                      // fills so far
	turn  uint64                      // the next new workload's first reuse count, modulo stale+1
	last  map[string]*resourceReading // by workload key
}

// resourceReading is a workload's last reading and when to read again;
// never modified once stored: snapshots share res.
type resourceReading struct {
	res  reading.Resources
	root string // the cgroup it was read from
	due  uint64 // the fill that reads the files again
}

func newResourceCache(r ResourceReader, stale int) *resourceCache {
	return &resourceCache{r: r, stale: uint64(max(stale, 0)), log: zap.NewNop(), last: map[string]*resourceReading{}}
}

// resourceTarget is what a fill needs of one published workload.
type resourceTarget struct {
	key, root string
	alive     bool
}

// fill returns the snapshot's fill: it reads each live workload's top
// cgroup whose reading is due and falls back to the last reading, and
// forgets readings of workloads no longer published.
func (c *resourceCache) fill(ts []resourceTarget) snapshot.ResourceFill {
	return func() []*reading.Resources {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.fills++
		out := make([]*reading.Resources, len(ts))
		keep := make(map[string]struct{}, len(ts))
		for i, t := range ts {
			keep[t.key] = struct{}{}
			last := c.last[t.key]
			if t.alive && t.root != "" && (last == nil || last.root != t.root || c.fills >= last.due) {
				if r := c.read(t, last); r != nil {
					last = r
				}
			}
			if last != nil {
				out[i] = &last.res
			}
		}
		for k := range c.last {
			if _, ok := keep[k]; !ok {
				delete(c.last, k)
			}
		}
		return out
	}
}

// read reads t's cgroup and stores the reading; nil when nothing could be
// read (the last reading stays, and is read again at the next fill).
func (c *resourceCache) read(t resourceTarget, last *resourceReading) *resourceReading {
	r := &resourceReading{root: t.root, due: c.fills + c.stale + 1}
	err := c.r.ReadInto(t.root, &r.res)
	if r.res.Available == 0 {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			c.log.Debug("read cgroup resources", zap.String("cgroup", t.root), zap.Error(err))
		}
		return nil
	}
	if last == nil {
		r.due = c.fills + 1 + c.turn%(c.stale+1)
		c.turn++
	}
	c.last[t.key] = r
	return r
}

// workloadKey identifies a workload by its level and id (the first label:
// container id, pod uid, VM uuid, job id, unit name), so names learnt later
// don't split its counters; without an id, by all its labels.
func workloadKey(level ident.Kind, vals []string) string {
	if len(vals) > 0 && vals[0] != "" {
		return string(level) + "\x00" + vals[0]
	}
	return string(level) + "\x00" + strings.Join(vals, "\x00")
}

// publish copies the workloads into the snapshot and forgets those past
// retention that no cgroup feeds any more.
func (r *rollup) publish(iv *interval, s *snapshot.Snapshot) {
	kept := retained(r.byKey, iv.now, r.retention, nil)
	s.Workloads = make([]snapshot.Workload, 0, len(kept))
	for _, u := range kept {
		c := u.u
		c.Labels = append([]string(nil), u.u.Labels...)
		u.f.clone().without(iv.gone).workload(&c)
		s.Workloads = append(s.Workloads, c)
	}
	if r.resources != nil {
		ts := make([]resourceTarget, len(kept))
		for i, u := range kept {
			ts[i] = resourceTarget{key: u.key, root: u.root, alive: u.u.Alive}
		}
		s.SetResourceFill(r.resources.fill(ts))
	}
}
