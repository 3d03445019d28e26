package discover

import (
	"bytes"
	"context"
	"errors"
	"io"
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

// With power.host-share.vsock-port the share read over vsock is the
// node's meter, named after the host, whatever power.host-share.path
// holds; a host that does not answer yet still makes it the meter (named
// "host"), the estimator standing in.
func TestOpenUsesHostShareOverVsock(t *testing.T) {
	meta := &hostshare.Meta{Version: hostshare.Version, Host: "hv8", Epoch: "e", Updated: time.Now(), Seq: 1,
		Zones: []hostshare.Zone{{Name: "package", Method: "measured", Source: "rapl", IdlePolicy: "even"}}}
	frame, err := hostshare.EncodeFrame(meta, map[string]float64{"package": 12})
	if err != nil {
		t.Fatal(err)
	}
	var dialed []uint32
	answer := true
	prev := vsockDialer
	t.Cleanup(func() { vsockDialer = prev })
	vsockDialer = func(port uint32, _ time.Duration) func(context.Context) (io.ReadCloser, error) {
		return func(context.Context) (io.ReadCloser, error) {
			dialed = append(dialed, port)
			if !answer {
				return nil, errors.New("connection reset")
			}
			return io.NopCloser(bytes.NewReader(frame)), nil
		}
	}
	cfg := Config{Source: "auto", SysfsRoot: t.TempDir(), ProcfsRoot: t.TempDir(), IPMI: "off", LookPath: noTools,
		HostShare: t.TempDir(), HostShareStaleness: time.Minute, HostShareVsock: 5924}
	m, err := Open(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(*hostshare.Fallback); !ok || m.Name() != "host:hv8" || m.Estimated() {
		t.Fatalf("meter %T %q estimated %v, want the host share host:hv8, measured", m, m.Name(), m.Estimated())
	}
	if len(dialed) == 0 || dialed[0] != 5924 {
		t.Errorf("dialed ports %v, want 5924", dialed)
	}
	answer = false
	m, err = Open(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(*hostshare.Fallback); !ok || m.Name() != "host" {
		t.Errorf("host not answering: meter %T %q, want the host share named host", m, m.Name())
	}
}
