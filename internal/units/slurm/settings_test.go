package slurm

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/setting"
)

// loadSettings is the slurm.* block with its defaults, changed by set
// and checked.
var loadSettings = setting.Try[Settings]

// The slurm.* block on its own: its defaults pass, and each bad value is
// refused naming its key.
func TestSettingsCheckNamesTheKey(t *testing.T) {
	if c, err := loadSettings(func(*Settings) {}); err != nil || c.Source != "auto" || c.Interval != 15*time.Minute || c.RestdVersion != "auto" {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	restd := func(c *Settings) { c.RestdURL, c.RestdUser, c.RestdTokenFile = "http://r:6820", "slurm", "/etc/jwt" }
	for _, tt := range []struct {
		name string
		set  func(c *Settings)
		want string
	}{
		{"source", func(c *Settings) { c.Source = "pbs" }, `invalid value "pbs" for slurm.source: allowed auto, restd, sacct, none`},
		{"polled", func(c *Settings) { c.Interval = 10 * time.Second }, `invalid value "10s" for slurm.interval: at least 1m: sacct and slurmdbd are not for polling`},
		{"interval 0", func(c *Settings) { c.Interval = 0 }, `invalid value "0s" for slurm.interval: must be positive`},
		{"lookback 0", func(c *Settings) { c.Lookback = 0 }, `invalid value "0s" for slurm.lookback: must be positive`},
		{"restd without a URL", func(c *Settings) { c.Source = "restd" }, `invalid value "" for slurm.restd.url: required with slurm.source restd`},
		{"restd over FTP", func(c *Settings) { restd(c); c.RestdURL = "ftp://r" }, `invalid value "ftp://r" for slurm.restd.url: want an http(s) URL`},
		{"restd without a user", func(c *Settings) { restd(c); c.RestdUser = "" }, `invalid value "" for slurm.restd.user: required with slurm.restd.url`},
		{"restd without a token", func(c *Settings) { restd(c); c.RestdTokenFile = "" }, `invalid value "" for slurm.restd.token-file: required with slurm.restd.url`},
		{"version", func(c *Settings) { c.RestdVersion = "v0.0.37" }, `invalid value "v0.0.37" for slurm.restd.version: want auto or one of v0.0.45`},
	} {
		if _, err := loadSettings(tt.set); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}

// Open picks the source the settings say: restd when asked or when auto
// has its URL, sacct when asked (and found) or when auto finds it,
// nothing otherwise; a sacct asked for and not found stops start-up
// naming slurm.sacct.path.
func TestSettingsOpen(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		set  func(c *Settings)
		want string // the source's name, "" for none, or the error
	}{
		{"none", func(c *Settings) { c.Source, c.RestdURL = "none", "http://r:6820" }, ""},
		{"restd", func(c *Settings) { c.Source = "restd" }, "slurmrestd"},
		{"sacct found", func(c *Settings) { c.Source, c.SacctPath = "sacct", exe }, "sacct"},
		{"sacct missing", func(c *Settings) { c.Source, c.SacctPath = "sacct", "/nonexistent/sacct" }, `slurm.sacct.path "/nonexistent/sacct": `},
		{"auto with a URL", func(c *Settings) { c.RestdURL, c.SacctPath = "http://r:6820", exe }, "slurmrestd"},
		{"auto finds sacct", func(c *Settings) { c.SacctPath = exe }, "sacct"},
		{"auto finds nothing", func(c *Settings) { c.SacctPath = "/nonexistent/sacct" }, ""},
	} {
		c, _ := loadSettings(tt.set)
		src, err := c.Open("c1")
		got := ""
		switch {
		case err != nil:
			got = err.Error()
		case src != nil:
			got = src.Name()
		}
		if !strings.HasPrefix(got, tt.want) || (tt.want == "" && got != "") {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
		switch s := src.(type) {
		case *Restd:
			if s.Cluster != "c1" || s.URL != c.RestdURL || s.Version != "auto" {
				t.Errorf("%s: %+v", tt.name, s)
			}
		case *Sacct:
			if s.Cluster != "c1" || s.Path != exe {
				t.Errorf("%s: %+v", tt.name, s)
			}
		}
	}
}
