package pbs

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/setting"
)

// The pbs.* block on its own: its defaults pass, each bad value is
// refused naming its key, and Open finds qstat or stops start-up naming
// pbs.qstat.path.
func TestSettingsCheckNamesTheKey(t *testing.T) {
	load := setting.Try[Settings]
	c, err := load(func(*Settings) {})
	if err != nil || c.Source != "none" || c.Interval != 15*time.Minute || c.QstatPath != "qstat" {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	if src, err := c.Open("c1"); src != nil || err != nil {
		t.Errorf("pbs.source none: %v %v", src, err)
	}
	for _, tt := range []struct {
		name string
		set  func(c *Settings)
		want string
	}{
		{"auto", func(c *Settings) { c.Source = "auto" }, `invalid value "auto" for pbs.source: allowed none, qstat`},
		{"polled", func(c *Settings) { c.Interval = 30 * time.Second }, `invalid value "30s" for pbs.interval: at least 1m: qstat -x lists the server's whole job history`},
		{"negative interval", func(c *Settings) { c.Interval = -time.Second }, `invalid value "-1s" for pbs.interval: must be positive`},
		{"lookback 0", func(c *Settings) { c.Lookback = 0 }, `invalid value "0s" for pbs.lookback: must be positive`},
	} {
		if _, err := load(tt.set); err == nil || err.Error() != tt.want {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
	c, _ = load(func(c *Settings) { c.Source, c.QstatPath = "qstat", "/nonexistent/qstat" })
	if _, err := c.Open("c1"); err == nil || !strings.HasPrefix(err.Error(), `pbs.qstat.path "/nonexistent/qstat": `) {
		t.Errorf("qstat missing: %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c.QstatPath = exe
	if src, err := c.Open("c1"); err != nil || src.(*Qstat).Path != exe || src.(*Qstat).Cluster != "c1" {
		t.Errorf("qstat found: %+v %v", src, err)
	}
}
