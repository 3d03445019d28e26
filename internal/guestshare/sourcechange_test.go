package guestshare

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/power/hostshare"
	"github.com/wattrace/wattrace/pkg/reading"
)

// When the host's package zone changes source or method (its RAPL read
// fails and its estimator stands in, then RAPL again), the VM's energy
// goes on in a series of the new labels, counting from zero, and the
// old one stops where it was. The share's counter is the zone's: it
// grows by each series' growth, each joule once, and its method follows
// the zone's series of the moment.
func TestWriterAcrossHostSourceChange(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "uuid-"+strings.ToLower(uuid))
	w := newWriter(t, root)
	rapl := snapshot.ZoneSeries{Zone: "package", Source: "rapl"}
	est := snapshot.ZoneSeries{Zone: "package", Source: "estimator", Estimated: true}
	// The VM's series at each snapshot, and the node's series of the
	// moment (the first published).
	steps := []struct {
		rapl, est float64
		current   snapshot.ZoneSeries
		want      float64
	}{
		{10, 0, rapl, 10},
		{25, 0, rapl, 25},
		{25, 4, est, 29}, // the estimator's series starts at 0
		{25, 9, est, 34},
		{31, 9, rapl, 40}, // RAPL again: its series resumes where it was
		{40, 9, rapl, 49},
	}
	for i, st := range steps {
		var e snapshot.Energy
		e = e.Add(rapl, st.rapl, 0)
		if st.est > 0 {
			e = e.Add(est, st.est, 0)
		}
		s := &snapshot.Snapshot{
			Time:      time.Unix(int64(1000+i), 0),
			Zones:     []snapshot.Zone{{ZoneID: reading.ZoneID{Name: "package", Socket: 0}, Source: st.current.Source, Estimated: st.current.Estimated}},
			Workloads: []snapshot.Workload{{Level: "vm", Labels: []string{uuid, "web01", ""}, Energy: e}},
		}
		if err := w.Write(s); err != nil {
			t.Fatal(err)
		}
		if j := fileJ(t, dir); j != st.want {
			t.Errorf("step %d (rapl %v J, estimator %v J): share %v J, want %v", i, st.rapl, st.est, j, st.want)
		}
		m, err := hostshare.ReadMeta(dir)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]string{false: "measured", true: "estimated"}[st.current.Estimated]; len(m.Zones) != 1 || m.Zones[0].Method != want || m.Zones[0].Source != st.current.Source {
			t.Errorf("step %d: meta zones %+v, want package %s by %s", i, m.Zones, want, st.current.Source)
		}
	}
}
