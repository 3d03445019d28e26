//go:build e2e

package e2e

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/wattrace/wattrace/pkg/power/hostshare"
)

// zsm names one node or workload energy series of a zone: zone, source,
// method.
type zsm struct{ zone, source, method string }

func (k zsm) String() string {
	return fmt.Sprintf("{zone=%q,source=%q,method=%q}", k.zone, k.source, k.method)
}

// bySeries sums a family's samples that pass keep by (zone, source,
// method), over modes, sockets and everything else.
func bySeries(fams families, name string, keep func(*dto.Metric) bool) map[zsm]float64 {
	out := map[zsm]float64{}
	for _, m := range match(fams, name, keep) {
		out[zsm{label(m, "zone"), label(m, "source"), label(m, "method")}] += value(m)
	}
	return out
}

// nodeSeries is the guest's node energy per series, idle and dynamic.
func nodeSeries(fams families) map[zsm]float64 {
	return bySeries(fams, "wattrace_node_energy_joules_total", nil)
}

// zoneSum is the node's energy of one zone summed over its series.
func zoneSum(s map[zsm]float64, zone string) float64 {
	var j float64
	for k, v := range s {
		if k.zone == zone {
			j += v
		}
	}
	return j
}

// checkAttribution checks, for each node series, that the guest's cgroups'
// series of the same labels hold what the node series gave them: the
// zone's dynamic energy less its unattributed part (the guest's idle
// policy is none, so its idle stays at node level). A workload series
// holding another source's or method's joules breaks the equality.
func checkAttribution(t *testing.T, fams families, when string) {
	t.Helper()
	dyn := bySeries(fams, "wattrace_node_energy_joules_total", labelsEq(map[string]string{"mode": "dynamic"}))
	un := bySeries(fams, "wattrace_node_unattributed_joules_total", nil)
	cg := bySeries(fams, "wattrace_cgroup_energy_joules_total", labelsEq(map[string]string{"mode": "dynamic"}))
	for k, d := range dyn {
		want := d - un[k]
		if got := cg[k]; math.Abs(got-want) > 1e-6*math.Max(1, want) {
			t.Errorf("%s: the guest's cgroups hold %.6f J of %s, the node series gave them %.6f J (dynamic %.6f - unattributed %.6f)",
				when, got, k, want, d, un[k])
		}
	}
	for k, v := range cg {
		if _, ok := dyn[k]; !ok && v != 0 && k.zone == "package" {
			// dram's node series end while the estimator stands in; its
			// cgroup series stay, frozen. A package one must have its
			// node series.
			t.Errorf("%s: cgroup series %s (%.6f J) has no node series", when, k, v)
		}
	}
}

// shareZones reads the share's counter of each zone its metadata names.
func shareZones(t *testing.T, dir string) (map[string]float64, *hostshare.Meta) {
	t.Helper()
	meta, err := hostshare.ReadMeta(dir)
	if err != nil {
		t.Fatalf("share: %v", err)
	}
	out := map[string]float64{}
	for _, z := range meta.Zones {
		b, err := os.ReadFile(filepath.Join(dir, hostshare.ZoneFile(z.Name)))
		if err != nil {
			t.Fatal(err)
		}
		uj, err := hostshare.ParseCounter(b)
		if err != nil {
			t.Fatal(err)
		}
		out[z.Name] = float64(uj) / 1e6
	}
	return out, meta
}

func logSeries(t *testing.T, what string, s map[zsm]float64) {
	t.Helper()
	var lines []string
	for k, v := range s {
		lines = append(lines, fmt.Sprintf("  %s %.4f", k, v))
	}
	sort.Strings(lines)
	t.Logf("%s:\n%s", what, strings.Join(lines, "\n"))
}

// outage is TestGuestSeriesAcrossOutage's state from phase to phase.
type outage struct {
	b        *guestBed
	g        *guestWatch
	addr     string
	hostArgs []string
	// series0 are the guest's node series when the host stopped, meta0
	// the share's metadata then; lastUpdate is before the guest's last
	// read of a new update; estLast the estimator's series at the end of
	// the stale phase.
	series0    map[zsm]float64
	meta0      *hostshare.Meta
	lastUpdate time.Time
	estLast    float64
}

var (
	outageZones = []string{"package", "dram"}
	// outageEst is the estimator's series of the package zone, the one
	// zone it models.
	outageEst = zsm{"package", "estimator", "estimated"}
)

func (o *outage) measured(zone string) zsm { return zsm{zone, o.b.hostSource, "measured"} }

// TestGuestSeriesAcrossOutage drives a real guest (the bed of
// TestGuestHostShare, with 128 MiB) through its host's outage: the host
// exporter stops (the share goes stale), the share is removed (it
// vanishes), the host comes back (a new epoch). Its host has two zones,
// package and dram; the guest's estimator models package only. Asserts,
// between phases, on the guest's /metrics against the host's share:
//
//   - stale and vanished: each zone's measured series stays where it was;
//     the estimator's package series is new and starts from its own
//     estimate (at most the estimate's upper band over the time since the
//     host's last update), not from the measured total; dram's node series
//     end (the estimator has no figure for it) with the host source
//     degraded;
//   - return: each measured series grows by the host's figure only (the
//     share's growth from the guest's first read of the new epoch), the
//     estimator's stops where it was, and over the whole run each zone's
//     sum over its series equals the host's figure plus the estimate
//     within 1%;
//   - at every phase the guest's cgroups' series of each label set hold
//     exactly what the node series of those labels gave them.
func TestGuestSeriesAcrossOutage(t *testing.T) {
	b := newGuestBed(t)
	begin := time.Now()
	b.boot(t, 128, "--web.listen-address=:9841", "--stats.interval=1s", "--accounting.mode=procfs",
		"--power.host-share.staleness="+guestStaleness.String())
	t.Logf("guest %s started after %v", guestVM, time.Since(begin).Round(time.Millisecond))
	// The host: package 20 W and dram 4 W, most of it idle, which the
	// one VM carries (idle-policy even splits it among the VMs), so that
	// the guest's measured totals are well above an estimate of the same
	// time and an estimator series that started from one stands out.
	sysfs := raplFixtureZones(t, filepath.Join(b.work, "sys"),
		fixtureZone{"intel-rapl:0", "package-0", 20}, fixtureZone{"intel-rapl:0:0", "dram", 4})
	o := &outage{b: b, g: b.watch(t), addr: fmt.Sprintf("localhost:%d", freePort(t)),
		hostArgs: b.hostArgs(sysfs, "--power.idle-watts=package=15,dram=3")}
	h := startExporterAt(t, o.addr, o.hostArgs...)
	o.measuredFirst(t)
	t.Logf("guest serving both zones measured after %v", time.Since(begin).Round(time.Millisecond))
	o.stale(t, h)
	o.vanished(t)
	o.back(t)
	if len(o.g.drops) > 0 {
		t.Errorf("guest counters decreased: %v", o.g.drops)
	}
	t.Logf("TestGuestSeriesAcrossOutage took %v", time.Since(begin).Round(time.Millisecond))
}

// measuredFirst waits until the guest serves both zones measured, then
// lets it count the host's figures for 10 s.
func (o *outage) measuredFirst(t *testing.T) {
	t.Helper()
	o.b.waitMeasured(t, o.g)
	var fams families
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Second) {
		var err error
		if fams, err = o.g.scrape(); err == nil {
			s := nodeSeries(fams)
			if s[o.measured("package")] > 0 && s[o.measured("dram")] > 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			dump(t, fams, nil, "wattrace_node_energy_joules_total")
			t.Fatalf("the guest did not serve both zones measured within 30 s")
		}
	}
	for i := 0; i < 10; i++ {
		time.Sleep(time.Second)
		_, _ = o.g.scrape()
	}
}

// frozen checks that no measured series moved since the host stopped.
func (o *outage) frozen(t *testing.T, fams families, when string) {
	t.Helper()
	s := nodeSeries(fams)
	for _, z := range outageZones {
		if v, ok := s[o.measured(z)]; ok && v != o.series0[o.measured(z)] {
			t.Errorf("%s: measured %s series %.6f J, was %.6f J when the host stopped: it must not move while the host is away",
				when, z, v, o.series0[o.measured(z)])
		}
	}
}

// stale stops the host exporter h (the share stays, no longer updated)
// and follows the guest until the estimator stands in.
func (o *outage) stale(t *testing.T, h *exporter) {
	t.Helper()
	// The guest's last read of a new update was before now.
	o.lastUpdate = time.Now()
	h.stop()
	s0, meta0 := shareZones(t, o.b.share)
	o.meta0 = meta0
	o.g.settled(t)
	f0 := o.g.e.mustScrape(t)
	o.series0 = nodeSeries(f0)
	logSeries(t, fmt.Sprintf("host stopped (share %v), the guest settled", s0), o.series0)
	checkAttribution(t, f0, "host stopped")
	if _, ok := o.series0[outageEst]; ok {
		t.Errorf("an estimator series %s before the share went stale", outageEst)
	}
	stopped := time.Now()
	var estFirst float64
	var seenEst time.Time
	for deadline := time.Now().Add(guestStaleness + 40*time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		fams, err := o.g.scrape()
		if err != nil {
			continue
		}
		o.frozen(t, fams, "stale")
		v, ok := nodeSeries(fams)[outageEst]
		switch {
		case !ok:
		case seenEst.IsZero():
			seenEst, estFirst = time.Now(), v
			o.fromZero(t, fams, v, seenEst, stopped)
		case v > estFirst && time.Since(seenEst) > 3*time.Second:
			o.estLast = v
			o.dramEnded(t, fams)
			checkAttribution(t, fams, "stale")
			return
		}
	}
	t.Fatalf("the estimator did not stand in within %v of the host stopping (first %.4f J at %v)", guestStaleness+40*time.Second, estFirst, seenEst)
}

// fromZero checks the estimator's series when it first appears, at v J:
// its own estimate since the host's last update, at most the upper band's
// watts over that time, and nothing of the measured total.
func (o *outage) fromZero(t *testing.T, fams families, v float64, seen, stopped time.Time) {
	t.Helper()
	upper, ok := sum(fams, "wattrace_node_estimated_power_upper_watts", map[string]string{"zone": "package"})
	if !ok {
		upper, _ = sum(fams, "wattrace_node_estimated_power_watts", map[string]string{"zone": "package"})
		upper *= 1.5
	}
	since := seen.Sub(o.lastUpdate)
	bound := 1.2*upper*since.Seconds() + 1
	t.Logf("stale after %v: the estimator's series appears at %.4f J (upper band %.2f W over %v since the host's last update: at most %.2f J); the measured package series holds %.4f J",
		seen.Sub(stopped).Round(time.Millisecond), v, upper, since.Round(time.Millisecond), bound, o.series0[o.measured("package")])
	if v > bound {
		t.Errorf("the estimator's series started at %.4f J, more than its own estimate since the host's last update (%.2f J): it carried another series' total", v, bound)
	}
	dump(t, fams, nil, "wattrace_node_energy_joules_total", "wattrace_source_up", "wattrace_source_degraded")
}

// dramEnded checks that the zone the estimator does not model has no
// node series while it stands in, and that the host source says so.
func (o *outage) dramEnded(t *testing.T, fams families) {
	t.Helper()
	if _, ok := nodeSeries(fams)[o.measured("dram")]; ok {
		t.Errorf("stale: the dram zone's measured node series is still exported while the estimator, which has no dram figure, stands in")
	}
	if d, _ := sum(fams, "wattrace_source_degraded", map[string]string{"source": o.b.hostSource, "reason": hostshare.ReasonZonesNotEstimated}); d != 1 {
		t.Errorf("stale: wattrace_source_degraded{source=%q,reason=%q} = %v, want 1", o.b.hostSource, hostshare.ReasonZonesNotEstimated, d)
	}
}

// vanished removes the share's files (the guest's reads fail); the
// estimator goes on.
func (o *outage) vanished(t *testing.T) {
	t.Helper()
	for _, f := range append([]string{hostshare.MetaFile}, zoneFiles(o.meta0)...) {
		if err := os.Remove(filepath.Join(o.b.share, f)); err != nil {
			t.Fatal(err)
		}
	}
	for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		if fams, err := o.g.scrape(); err == nil {
			o.frozen(t, fams, "vanished")
		}
	}
	fv := o.g.e.mustScrape(t)
	o.frozen(t, fv, "vanished")
	checkAttribution(t, fv, "vanished")
	if up, _ := sum(fv, "wattrace_source_up", map[string]string{"source": o.b.hostSource}); up != 0 {
		t.Errorf("vanished: wattrace_source_up{source=%q} = %v, want 0", o.b.hostSource, up)
	}
	if v := nodeSeries(fv)[outageEst]; v <= o.estLast {
		t.Errorf("vanished: the estimator's series %.4f J did not grow past %.4f J", v, o.estLast)
	}
	logSeries(t, "share vanished", nodeSeries(fv))
}

// back starts the host exporter again: the files gone, it writes a new
// epoch from zero. It is stopped after its first figures, so that the
// guest's first read of the new epoch (its baseline: the outage is the
// estimator's) is of a known counter, and started again (continuing the
// epoch) to count on; then stopped for good, so that the guest's and the
// share's last figures are the same.
func (o *outage) back(t *testing.T) {
	t.Helper()
	h2 := startExporterAt(t, o.addr, o.hostArgs...)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(o.b.share, hostshare.MetaFile)); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the host did not write the share again within 20 s")
		}
	}
	hostMatchesShare(t, h2, o.b.share)
	h2.stop()
	sb, metaB := shareZones(t, o.b.share)
	if metaB.Epoch == o.meta0.Epoch {
		t.Errorf("the share written again after it vanished kept epoch %q: want a new one", metaB.Epoch)
	}
	fb := o.firstRead(t)
	seriesB := nodeSeries(fb)
	logSeries(t, fmt.Sprintf("the host back (new epoch %s, share %v)", metaB.Epoch, sb), seriesB)
	o.frozen(t, fb, "the guest's first read of the host's new epoch")
	h3 := startExporterAt(t, o.addr, o.hostArgs...)
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
		_, _ = o.g.scrape()
	}
	h3.stop()
	se, metaE := shareZones(t, o.b.share)
	o.g.settled(t)
	fe := o.g.e.mustScrape(t)
	seriesE := nodeSeries(fe)
	logSeries(t, fmt.Sprintf("the host stopped again (share %v)", se), seriesE)
	checkAttribution(t, fe, "after the host's return")
	if metaE.Epoch != metaB.Epoch {
		t.Errorf("the host's restart changed the epoch %q -> %q", metaB.Epoch, metaE.Epoch)
	}
	if seriesE[outageEst] != seriesB[outageEst] {
		t.Errorf("the estimator's series went on from %.6f J to %.6f J after the host's return", seriesB[outageEst], seriesE[outageEst])
	}
	for _, z := range outageZones {
		o.zoneTotals(t, z, seriesE, se[z]-sb[z])
	}
}

// firstRead scrapes the guest until it has read the host's new epoch
// (the host source up again) and returns that scrape.
func (o *outage) firstRead(t *testing.T) families {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		if fb, err := o.g.scrape(); err == nil {
			if up, _ := sum(fb, "wattrace_source_up", map[string]string{"source": o.b.hostSource}); up == 1 {
				return fb
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guest did not read its host's new epoch within 15 s")
		}
	}
}

// zoneTotals checks a zone at the end against the host's figure since the
// guest's first read of the new epoch: its measured series grew by that
// only, and its sum over series by that plus the estimate.
func (o *outage) zoneTotals(t *testing.T, z string, seriesE map[zsm]float64, host float64) {
	t.Helper()
	grew := seriesE[o.measured(z)] - o.series0[o.measured(z)]
	estimate := seriesE[zsm{z, "estimator", "estimated"}]
	total := zoneSum(seriesE, z) - zoneSum(o.series0, z)
	t.Logf("zone %s: measured series +%.4f J, host's figure since the guest's first read of the new epoch +%.4f J (%+.4f%%); estimator's series %.4f J; sum over series +%.4f J vs host + estimate %.4f J (%+.4f%%)",
		z, grew, host, pct(grew, host), estimate, total, host+estimate, pct(total, host+estimate))
	if host <= 0 || !within(grew, host, 0.01) {
		t.Errorf("zone %s: the measured series grew %.4f J after the host's return, the host's figure %.4f J: want within 1%%", z, grew, host)
	}
	if !within(total, host+estimate, 0.01) {
		t.Errorf("zone %s: its series sum grew %.4f J over the run, the host's figure plus the estimate is %.4f J: want within 1%%", z, total, host+estimate)
	}
}
