package stats

import (
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
)

// DropReporter is implemented by the BPF sources (the accounting loader and
// the probes): the events each of their maps had no room for.
type DropReporter interface {
	MapDrops() ([]reading.MapDrops, error)
}

// health is the stage that copies the sources' own state into the
// snapshot: the health of the meter's sources and of every other source
// that reports it (procfs, cgroupfs, the BPF maps' counters), and the BPF
// maps' drops, and the estimator's current estimates with their bands.
type health struct {
	meter   Meter
	reports []HealthReporter
	drops   []DropReporter
	// late are the stages that read a source under the steps' deadlines
	// (the meter's zones): their overruns join the source's health.
	late []overrunner
	log  *zap.Logger
}

func newHealth(meter Meter, log *zap.Logger, sources ...any) *health {
	h := &health{meter: meter, log: log}
	for _, s := range sources {
		if d, ok := s.(DropReporter); ok {
			h.drops = append(h.drops, d)
		}
		if r, ok := s.(HealthReporter); ok && s != any(meter) {
			h.reports = append(h.reports, r)
		}
	}
	return h
}

func (h *health) publish(s *snapshot.Snapshot) {
	if r, ok := h.meter.(HealthReporter); ok {
		s.Meters = r.Health()
	}
	for _, o := range h.late {
		s.Meters = addOverruns(s.Meters, o.overruns())
	}
	if r, ok := h.meter.(EstimateReporter); ok {
		s.Estimates = r.Estimates()
	}
	for _, r := range h.reports {
		s.Meters = append(s.Meters, r.Health()...)
	}
	for _, d := range h.drops {
		md, err := d.MapDrops()
		if err != nil {
			h.log.Warn("read BPF map drops", zap.Error(err))
			continue
		}
		s.MapDrops = append(s.MapDrops, md...)
	}
}
