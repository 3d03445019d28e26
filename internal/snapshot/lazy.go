package snapshot

import (
	"sync"

	"github.com/wattrace/wattrace/pkg/reading"
)

// ResourceFill reads the resource counters of a snapshot's workloads: one
// entry per Workloads element, in order, nil where nothing was read. The
// stats loop provides it; it runs at most once per snapshot, on the first
// scrape that asks, so cgroup files are read only when someone exports them.
type ResourceFill func() []*reading.Resources

// lazyResources is the part of a snapshot filled on demand.
type lazyResources struct {
	once sync.Once
	fill ResourceFill
	res  []*reading.Resources
}

// SetResourceFill makes WorkloadResources read through fill, once. The loop
// calls it before publishing; after publication the snapshot is not
// modified (the fill's result is written once, under a sync.Once).
func (s *Snapshot) SetResourceFill(fill ResourceFill) {
	s.lazy = &lazyResources{fill: fill}
}

// WorkloadResources returns the resource counters of Workloads[i]: read on
// the first call for this snapshot when the loop set a fill (concurrent
// scrapes wait for that one reading and share it), else
// Workloads[i].Resources.
func (s *Snapshot) WorkloadResources(i int) *reading.Resources {
	if s.lazy != nil {
		s.lazy.once.Do(func() { s.lazy.res = s.lazy.fill() })
		if i < len(s.lazy.res) && s.lazy.res[i] != nil {
			return s.lazy.res[i]
		}
	}
	return s.Workloads[i].Resources
}
