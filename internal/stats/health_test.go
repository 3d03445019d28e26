package stats

import (
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
)

type healthyMeter struct {
	fakeMeter
	h []reading.SourceHealth
}

func (m *healthyMeter) Health() []reading.SourceHealth { return m.h }

type droppingSource struct {
	fakeSource
	drops uint64
}

func (s *droppingSource) MapDrops() ([]reading.MapDrops, error) {
	return []reading.MapDrops{{Map: "exited_procs", Drops: s.drops}, {Map: "exited_cgroups"}}, nil
}

// The snapshot carries the meter's health and the BPF maps' drops as the
// sources report them each interval.
func TestSnapshotCarriesHealthAndDrops(t *testing.T) {
	m := &healthyMeter{h: []reading.SourceHealth{{Source: "redfish", Up: true, Age: 2 * time.Second, Reads: 4, Errors: 1}}}
	src := &droppingSource{drops: 3}
	l, err := New(Config{Interval: time.Second, IdlePolicy: "none"}, src, m, anyName{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1000, 0)
	l.Step(t0)
	src.drops = 7
	l.Step(t0.Add(time.Second))
	s := l.Snapshot()
	// The meter's health, then that of the accounting's CPU counters,
	// validated by the loop for a source that does not report its own.
	if len(s.Meters) != 2 || s.Meters[0].Source != "redfish" || s.Meters[0].Errors != 1 || s.Meters[0].Age != 2*time.Second ||
		s.Meters[1].Source != "bpf" || s.Meters[1].Reads != 2 || !s.Meters[1].Up {
		t.Errorf("meters %+v, want redfish's health, then bpf's", s.Meters)
	}
	if len(s.MapDrops) != 2 || s.MapDrops[0].Map != "exited_procs" || s.MapDrops[0].Drops != 7 {
		t.Errorf("map drops %+v, want exited_procs at 7", s.MapDrops)
	}
}

// healthyResources is a cgroup resource reader that reports its health.
type healthyResources struct{}

func (healthyResources) ReadInto(string, *reading.Resources) error { return nil }
func (healthyResources) Health() []reading.SourceHealth {
	return []reading.SourceHealth{{Source: "cgroupfs", Up: true, Reads: 3, Rejected: map[string]uint64{"backwards": 1}}}
}

// The cgroup resource reader's rejections reach the snapshot's health.
func TestResourceReaderHealth(t *testing.T) {
	l, err := New(Config{Interval: time.Second, IdlePolicy: "none"}, &fakeSource{}, &fakeMeter{}, anyName{}, nil,
		WithResources(healthyResources{}, 0))
	if err != nil {
		t.Fatal(err)
	}
	l.Step(time.Unix(1000, 0))
	for _, h := range l.Snapshot().Meters {
		if h.Source == "cgroupfs" && h.Rejected["backwards"] == 1 {
			return
		}
	}
	t.Errorf("health %+v, want cgroupfs with 1 backwards rejection", l.Snapshot().Meters)
}
