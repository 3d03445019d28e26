package stats

import (
	"errors"
	"io/fs"
	"path"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/snapshot"
	"github.com/wattrace/wattrace/pkg/workload"
)

// IdentityResolver names the workload that owns a cgroup path;
// *workload.Resolver implements it. Resolve must be cheap on a cached path:
// it runs for every cgroup each interval.
type IdentityResolver interface {
	Resolve(path string) workload.Identity
	Sweep() int
}

type unitState struct {
	u    snapshot.Workload
	seen bool
	// root is the unit's top cgroup: the highest ancestor of its cgroups
	// that still belongs to it (a job's job_N, a pod's pod slice).
	root string
	res  snapshot.Resources
	read bool
}

// ResourceReader reads a cgroup's resource counters;
// *cgroupstats.Reader implements it.
type ResourceReader interface {
	ReadInto(rel string, s *snapshot.Resources) error
}

// reported is what of a cgroup workload's cumulative figures has already
// been added to its units.
type reported struct {
	cpu      float64
	switches uint64
	energy   snapshot.Energy
}

// rollUp adds each cgroup's growth since the last interval to the units
// that own it at every enabled level.
func (l *Loop) rollUp(now time.Time) {
	if l.ids == nil {
		return
	}
	for _, u := range l.units {
		u.seen, u.u.Alive, u.u.Cgroups = false, false, 0
	}
	for _, w := range l.byPath {
		id := l.ids.Resolve(w.w.Cgroup)
		dCPU := w.w.CPUSeconds - w.rep.cpu
		dSw := w.w.ContextSwitches - w.rep.switches
		var dE snapshot.Energy
		for _, e := range w.w.Energy {
			p := w.rep.energy.Get(e.Zone)
			dE = dE.Add(e.Zone, e.DynamicJ-p.DynamicJ, e.IdleJ-p.IdleJ)
		}
		w.rep = reported{cpu: w.w.CPUSeconds, switches: w.w.ContextSwitches, energy: append(w.rep.energy[:0], w.w.Energy...)}
		for _, level := range l.levels {
			vals, ok := id.LabelValues(level)
			if !ok {
				continue
			}
			key := unitKey(level, vals)
			u := l.units[key]
			if u == nil {
				u = &unitState{u: snapshot.Workload{Level: string(level), LastSeen: now}}
				l.units[key] = u
			}
			// Names filled in by enrichment replace the blanks they
			// had while the unit was first seen.
			u.u.Labels = vals
			u.u.Manager = managerOf(level, id)
			u.u.CPUSeconds += dCPU
			u.u.ContextSwitches += dSw
			for _, e := range dE {
				u.u.Energy = u.u.Energy.Add(e.Zone, e.DynamicJ, e.IdleJ)
			}
			u.seen = true
			if w.w.Alive {
				u.u.Alive = true
				u.u.Cgroups++
				u.u.LastSeen = now
			}
			if u.root == "" || len(w.w.Cgroup) < len(u.root) {
				u.root = l.unitRoot(w.w.Cgroup, level, key)
			}
		}
	}
	l.readResources()
	l.ids.Sweep()
}

// unitRoot climbs from a unit's cgroup to the highest ancestor that still
// belongs to the same unit at that level.
func (l *Loop) unitRoot(p string, level workload.Kind, key string) string {
	for p != "/" && p != "" {
		parent := path.Dir(p)
		vals, ok := l.ids.Resolve(parent).LabelValues(level)
		if !ok || unitKey(level, vals) != key {
			break
		}
		p = parent
	}
	return p
}

// readResources reads each live unit's resource counters from its top
// cgroup. A unit whose cgroup is gone keeps its last reading, so the
// scrapes during retention see its final values.
func (l *Loop) readResources() {
	if l.resources == nil {
		return
	}
	for _, u := range l.units {
		if !u.u.Alive || u.root == "" {
			continue
		}
		var st snapshot.Resources
		st.IO = u.res.IO[:0]
		err := l.resources.ReadInto(u.root, &st)
		if st.Available == 0 {
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				l.log.Debug("read cgroup resources", zap.String("cgroup", u.root), zap.Error(err))
			}
			continue
		}
		u.res, u.read = st, true
	}
}

// unitKey identifies a unit by its level and id (the first label: container
// id, pod uid, VM uuid, job id, unit name), so names learnt later don't
// split its counters; without an id, by all its labels.
func unitKey(level workload.Kind, vals []string) string {
	if len(vals) > 0 && vals[0] != "" {
		return string(level) + "\x00" + vals[0]
	}
	return string(level) + "\x00" + strings.Join(vals, "\x00")
}

// exportUnits copies the units into the snapshot and drops those past
// retention that no cgroup feeds any more.
func (l *Loop) exportUnits(now time.Time) []snapshot.Workload {
	out := make([]snapshot.Workload, 0, len(l.units))
	for k, u := range l.units {
		if !u.u.Alive && now.Sub(u.u.LastSeen) > l.cfg.Retention {
			if !u.seen {
				delete(l.units, k)
			}
			continue
		}
		c := u.u
		c.Labels = append([]string(nil), u.u.Labels...)
		c.Energy = append(snapshot.Energy(nil), u.u.Energy...)
		if u.read {
			r := u.res
			r.IO = append([]snapshot.DeviceIO(nil), u.res.IO...)
			c.Resources = &r
		}
		out = append(out, c)
	}
	return out
}

// managerOf names the manager of a unit at a level: a container's runtime
// for containers, kubernetes for pods (whatever runs their containers).
func managerOf(level workload.Kind, id workload.Identity) string {
	if level == workload.KindPod {
		return workload.ManagerKubernetes
	}
	return id.Manager
}
