package stats

import (
	"context"
	"math"
	"os"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/power/hostshare"
	"github.com/wattrace/wattrace/pkg/reading"
)

// stubEstimator models a fixed 5 W.
type stubEstimator struct{ j float64 }

func (e *stubEstimator) Name() string    { return "estimator" }
func (e *stubEstimator) Estimated() bool { return true }
func (e *stubEstimator) Advance(_ float64, dt time.Duration) {
	e.j += 5 * dt.Seconds()
}
func (e *stubEstimator) Read(_ context.Context) ([]reading.ZoneSample, error) {
	return []reading.ZoneSample{{Zone: reading.ZonePackage, Socket: -1, Joules: e.j}}, nil
}

// A guest whose meter is its host's share: the guest's cgroups, idle and
// unattributed add up to exactly what the host gave, the zone is measured
// by "host:hv1"; once the share is stale the zone says estimator and
// estimated, in a series of its own from zero, the measured one stopping
// where it was.
func TestHostShareInGuest(t *testing.T) {
	now := time.Unix(5000, 0)
	clock := func() time.Time { return now }
	dir := t.TempDir()
	meta := &hostshare.Meta{Version: hostshare.Version, Host: "hv1", Epoch: "e1", IntervalSeconds: 1,
		Zones: []hostshare.Zone{{Name: "package", Method: "measured", Source: "rapl", IdlePolicy: "even"}}}
	hostJ := 1000.0
	write := func() {
		meta.Seq++
		meta.Updated = now
		if err := hostshare.Write(dir, meta, map[string]float64{"package": hostJ}); err != nil {
			t.Fatal(err)
		}
	}
	write()
	host, err := hostshare.Open(hostshare.Options{Dir: dir, Staleness: 3 * time.Second, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	m := hostshare.NewFallback(host, &stubEstimator{}, nil)
	src := &fakeSource{}
	src.add(1, 100, 0, 0)
	src.add(2, 200, 0, 0)
	l := mustLoop(t, Config{IdleWatts: map[string]float64{"package": 2}, IdlePolicy: "even", CPUs: 2}, src, m, names{1: "/a", 2: "/b"})
	l.Step(now)
	given := 0.0
	for i := 0; i < 10; i++ {
		now = now.Add(time.Second)
		if i%3 != 2 { // some intervals idle: unattributed
			src.add(1, 100, 0, 3e8)
			src.add(2, 200, 0, 1e8)
		}
		hostJ += 10 + float64(i)
		given += 10 + float64(i)
		write()
		l.Step(now)
	}
	s := l.Snapshot()
	z := zoneOf(s, "package", -1)
	if z.Source != "host:hv1" || z.Estimated {
		t.Errorf("zone source %q estimated %v, want host:hv1, measured", z.Source, z.Estimated)
	}
	if z.EnergyJ != given {
		t.Errorf("guest node energy %v J, host gave %v J", z.EnergyJ, given)
	}
	var sum float64
	for _, c := range []string{"/a", "/b"} {
		e := cgroupByPath(s, c).Energy.Get("package")
		sum += e.DynamicJ + e.IdleJ
	}
	if math.Abs(sum+z.UnattributedJ+(z.IdleJ-idleCredited(s))-given) > 1e-9 {
		t.Errorf("cgroups %v + unattributed %v + idle not credited %v != %v given", sum, z.UnattributedJ, z.IdleJ-idleCredited(s), given)
	}
	// The share is removed: host down, then estimated.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	before := z.EnergyJ
	for i := 0; i < 5; i++ {
		now = now.Add(time.Second)
		l.Step(now)
	}
	s = l.Snapshot()
	z = zoneOf(s, "package", -1)
	if z.Source != "estimator" || !z.Estimated {
		t.Errorf("after the share went stale: source %q estimated %v, want estimator, estimated", z.Source, z.Estimated)
	}
	// Stale after 3 s, so the estimate covers the 5 s since the last
	// update: 25 J.
	if got := z.EnergyJ; math.Abs(got-25) > 1e-9 {
		t.Errorf("estimated %v J over the outage, want 25", got)
	}
	for _, o := range s.Zones {
		if o.Name == "package" && o.Source == "host:hv1" && o.EnergyJ != before {
			t.Errorf("measured series %v J after the outage, want %v (stopped)", o.EnergyJ, before)
		}
	}
	var hostUp *reading.SourceHealth
	for i := range s.Meters {
		if s.Meters[i].Source == "host:hv1" {
			hostUp = &s.Meters[i]
		}
	}
	if hostUp == nil || hostUp.Up {
		t.Errorf("host health %+v, want present and down", hostUp)
	}
}

// idleCredited is the idle energy the cgroups at the root level got.
func idleCredited(s *snapshot.Snapshot) float64 {
	var j float64
	for _, c := range []string{"/a", "/b"} {
		j += cgroupByPath(s, c).Energy.Get("package").IdleJ
	}
	return j
}

// The method is per zone: a host that measured its package and estimated
// its DRAM gives a guest whose package zone is measured and whose dram
// zone is estimated; when the host starts measuring DRAM, the guest's
// zone's energy goes to a measured series from zero, the estimated one
// stopping.
func TestHostShareMethodPerZone(t *testing.T) {
	now := time.Unix(5000, 0)
	clock := func() time.Time { return now }
	dir := t.TempDir()
	meta := &hostshare.Meta{Version: hostshare.Version, Host: "hv1", Epoch: "e1", IntervalSeconds: 1,
		Zones: []hostshare.Zone{{Name: "package", Method: "measured", Source: "rapl", IdlePolicy: "even"},
			{Name: "dram", Method: "estimated", Source: "estimator", IdlePolicy: "even"}}}
	pkgJ, dramJ := 1000.0, 100.0
	write := func() {
		meta.Seq++
		meta.Updated = now
		if err := hostshare.Write(dir, meta, map[string]float64{"package": pkgJ, "dram": dramJ}); err != nil {
			t.Fatal(err)
		}
	}
	write()
	host, err := hostshare.Open(hostshare.Options{Dir: dir, Staleness: 3 * time.Second, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	m := hostshare.NewFallback(host, &stubEstimator{}, nil)
	src := &fakeSource{}
	src.add(1, 100, 0, 0)
	l := mustLoop(t, Config{IdlePolicy: "even", CPUs: 2}, src, m, names{1: "/a"})
	l.Step(now)
	step := func() *snapshot.Snapshot {
		now = now.Add(time.Second)
		src.add(1, 100, 0, 3e8)
		pkgJ, dramJ = pkgJ+10, dramJ+2
		write()
		l.Step(now)
		return l.Snapshot()
	}
	s := step()
	p, d := zoneOf(s, "package", -1), zoneOf(s, "dram", -1)
	if p.Source != "host:hv1" || p.Estimated || d.Source != "host:hv1" || !d.Estimated || p.EnergyJ != 10 || d.EnergyJ != 2 {
		t.Fatalf("package %s estimated %v %v J, dram %s estimated %v %v J; want measured 10 J and estimated 2 J, both from host:hv1",
			p.Source, p.Estimated, p.EnergyJ, d.Source, d.Estimated, d.EnergyJ)
	}
	meta.Zones[1].Method, meta.Zones[1].Source = "measured", "rapl"
	s = step()
	if d := zoneOf(s, "dram", -1); d.Estimated || d.EnergyJ != 2 {
		t.Errorf("dram after the host measured it: estimated %v, %v J; want measured, 2 J", d.Estimated, d.EnergyJ)
	}
	for _, d := range s.Zones {
		if d.Name == "dram" && d.Estimated && d.EnergyJ != 2 {
			t.Errorf("estimated dram series %v J, want 2 (stopped)", d.EnergyJ)
		}
	}
}

// A zone the estimator does not model (dram) ends while the estimator
// stands in for a stale host: its series are marked ended (the node's are
// not exported), rather than
// one frozen under the host's measured label, and the host's source says
// why in its degraded reason. When the host is back the measured series
// resumes where it stopped and grows by the host's figure only.
func TestHostShareUnestimatedZoneEnds(t *testing.T) {
	now := time.Unix(5000, 0)
	clock := func() time.Time { return now }
	dir := t.TempDir()
	meta := &hostshare.Meta{Version: hostshare.Version, Host: "hv1", Epoch: "e1", IntervalSeconds: 1,
		Zones: []hostshare.Zone{{Name: "package", Method: "measured", Source: "rapl", IdlePolicy: "even"},
			{Name: "dram", Method: "measured", Source: "rapl", IdlePolicy: "even"}}}
	pkgJ, dramJ := 1000.0, 100.0
	write := func() {
		meta.Seq++
		meta.Updated = now
		if err := hostshare.Write(dir, meta, map[string]float64{"package": pkgJ, "dram": dramJ}); err != nil {
			t.Fatal(err)
		}
	}
	write()
	host, err := hostshare.Open(hostshare.Options{Dir: dir, Staleness: 3 * time.Second, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	m := hostshare.NewFallback(host, &stubEstimator{}, nil)
	src := &fakeSource{}
	src.add(1, 100, 0, 0)
	l := mustLoop(t, Config{IdlePolicy: "even", CPUs: 2}, src, m, names{1: "/a"})
	l.Step(now)
	step := func(fresh bool) *snapshot.Snapshot {
		now = now.Add(time.Second)
		src.add(1, 100, 0, 3e8)
		if fresh {
			pkgJ, dramJ = pkgJ+10, dramJ+2
			write()
		}
		l.Step(now)
		return l.Snapshot()
	}
	for i := 0; i < 3; i++ {
		step(true)
	}
	var s *snapshot.Snapshot
	for i := 0; i < 5; i++ { // stale after 3 s
		s = step(false)
	}
	for _, z := range s.Zones {
		if z.Name == "dram" && !z.Ended {
			t.Errorf("dram series %s estimated %v %v J not ended while the estimator stands in", z.Source, z.Estimated, z.EnergyJ)
		}
		if z.Name == "package" && z.Ended {
			t.Errorf("package series %s estimated %v ended; the estimator models it", z.Source, z.Estimated)
		}
	}
	reason := ""
	for _, h := range s.Meters {
		if h.Source == "host:hv1" {
			reason = h.Reason
		}
	}
	if reason != "host_share_stale_zones_not_estimated" {
		t.Errorf("host source's degraded reason %q, want host_share_stale_zones_not_estimated", reason)
	}
	for i := 0; i < 2; i++ {
		s = step(true)
	}
	var dram []snapshot.Zone
	for _, z := range s.Zones {
		if z.Name == "dram" {
			dram = append(dram, z)
		}
	}
	// 6 J before the outage, the fresh baseline at the return, then 2 J.
	if len(dram) != 1 || dram[0].Source != "host:hv1" || dram[0].Estimated || dram[0].Ended || math.Abs(dram[0].EnergyJ-8) > 1e-9 {
		t.Errorf("dram after the host's return: %+v; want one measured host:hv1 series of 8 J", dram)
	}
	for _, h := range s.Meters {
		if h.Source == "host:hv1" && h.Reason != "" {
			t.Errorf("host source's degraded reason %q after its return, want none", h.Reason)
		}
	}
}
