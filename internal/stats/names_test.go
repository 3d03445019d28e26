package stats

import (
	"testing"
	"time"
)

// A cgroup id the resolver cannot find (removed before the first read) is
// named from the cgroup names, exported under that path as not alive and
// kept for retention; one nobody can name keeps its "id:N" placeholder.
func TestRemovedCgroupNamedFromCreation(t *testing.T) {
	src := &fakeSource{}
	l, err := New(Config{Interval: time.Second, Retention: 10 * time.Second, IdlePolicy: "none"}, src,
		&fakeMeter{}, names{}, nil, WithCgroupNames(names{7: "/batch/step-1"}))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	l.Step(t0)
	src.add(7, 70, 0, 250e6)
	src.add(8, 80, 0, 100e6)
	l.Step(t0.Add(time.Second))
	s := l.Snapshot()
	c := cgroupByPath(s, "/batch/step-1")
	if c.CPUSeconds != 0.25 || c.Alive || c.CgroupID != 7 {
		t.Errorf("named from creation: %+v, want 0.25 s, not alive, id 7", c)
	}
	if p := cgroupByPath(s, "id:8"); p.CPUSeconds != 0.1 {
		t.Errorf("unnamed id: %+v, want id:8 with 0.1 s", p)
	}
	for _, pr := range s.Processes {
		if pr.PID == 70 && pr.Cgroup != "/batch/step-1" {
			t.Errorf("process 70's cgroup %q, want /batch/step-1", pr.Cgroup)
		}
	}
	l.Step(t0.Add(5 * time.Second))
	if c := cgroupByPath(l.Snapshot(), "/batch/step-1"); c.CPUSeconds != 0.25 {
		t.Errorf("within retention: %+v, want kept", c)
	}
	l.Step(t0.Add(20 * time.Second))
	if c := cgroupByPath(l.Snapshot(), "/batch/step-1"); c.Cgroup != "" {
		t.Errorf("past retention: %+v, want dropped", c)
	}
}
