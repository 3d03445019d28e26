package discover

import (
	"context"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/power/hostshare"
)

// In auto mode a guest with its host's share mounted uses it as the node's
// meter (measured, named after the host), with the estimator standing by;
// without one the table is walked and the estimator models.
func TestOpenUsesHostShare(t *testing.T) {
	dir := t.TempDir()
	meta := &hostshare.Meta{Version: hostshare.Version, Host: "hv7", Epoch: "e", Updated: time.Now(), Seq: 1,
		Zones: []hostshare.Zone{{Name: "package", Method: "measured", Source: "rapl", IdlePolicy: "even"}}}
	if err := hostshare.Write(dir, meta, map[string]float64{"package": 12}); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Source: "auto", SysfsRoot: t.TempDir(), ProcfsRoot: t.TempDir(), IPMI: "off", LookPath: noTools,
		HostShare: dir, HostShareStaleness: time.Minute}
	m, err := Open(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := m.(*hostshare.Fallback)
	if !ok || m.Name() != "host:hv7" || m.Estimated() {
		t.Fatalf("meter %T %q estimated %v, want the host share host:hv7, measured", m, m.Name(), m.Estimated())
	}
	if got := zones(t, f); len(got) != 1 || got[0] != "host:hv7:package" {
		t.Errorf("zones %v, want host:hv7:package", got)
	}
	// Absent share: the estimator.
	cfg.HostShare = t.TempDir()
	m, err = Open(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m.Name() != "estimator" || !m.Estimated() {
		t.Errorf("without a share: %q estimated %v, want the estimator", m.Name(), m.Estimated())
	}
}
