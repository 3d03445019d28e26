package slurm

import (
	"fmt"
	"net/url"
	"os/exec"
	"strings"
	"time"

	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/internal/units/feed"
)

// The slurm.* keys (wattrace-api's).
const (
	KeySource         = "slurm.source"
	KeyInterval       = "slurm.interval"
	KeyLookback       = "slurm.lookback"
	KeySacctPath      = "slurm.sacct.path"
	KeyRestdURL       = "slurm.restd.url"
	KeyRestdUser      = "slurm.restd.user"
	KeyRestdTokenFile = "slurm.restd.token-file"
	KeyRestdVersion   = "slurm.restd.version"
)

// Sources are the allowed values of slurm.source.
var Sources = []string{"auto", "restd", "sacct", "none"}

// Settings say where Slurm job metadata comes from and how often it is
// read (Open, NewFeeder).
type Settings struct {
	// Source: auto (restd when RestdURL is set, else sacct when found),
	// restd, sacct or none.
	Source         string
	Interval       time.Duration
	Lookback       time.Duration
	SacctPath      string
	RestdURL       string
	RestdUser      string
	RestdTokenFile string
	// RestdVersion: auto (probe slurmrestd's data_parser versions, newest
	// first) or one of RestdVersions.
	RestdVersion string
}

// Declare declares slurm.*, bound to c.
func (c *Settings) Declare(s *setting.Set) {
	s.Enum(&c.Source, KeySource, "auto", Sources, "Slurm job metadata: auto (restd when slurm.restd.url is set, else sacct when found), restd, sacct or none.")
	s.AnyDuration(&c.Interval, KeyInterval, 15*time.Minute, "Time between reads of Slurm's accounting.").Checked(func() error {
		switch {
		case c.Interval <= 0:
			return setting.Invalid(KeyInterval, c.Interval, "must be positive")
		case c.Interval < time.Minute:
			return setting.Invalid(KeyInterval, c.Interval, "at least 1m: sacct and slurmdbd are not for polling")
		}
		return nil
	})
	s.AnyDuration(&c.Lookback, KeyLookback, 24*time.Hour, "How far back the first read goes.").Checked(func() error {
		if c.Lookback <= 0 {
			return setting.Invalid(KeyLookback, c.Lookback, "must be positive")
		}
		return nil
	})
	s.String(&c.SacctPath, KeySacctPath, "sacct", "The sacct command.")
	s.String(&c.RestdURL, KeyRestdURL, "", "slurmrestd base URL, e.g. http://slurmrestd:6820 (its accounting API, /slurmdb/<version>/jobs).").Checked(func() error {
		if c.Source == "restd" && c.RestdURL == "" {
			return setting.Invalid(KeyRestdURL, "", "required with slurm.source restd")
		}
		if u, err := url.Parse(c.RestdURL); c.RestdURL != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
			return setting.Invalid(KeyRestdURL, c.RestdURL, "want an http(s) URL")
		}
		return nil
	})
	s.String(&c.RestdUser, KeyRestdUser, "", "User name sent to slurmrestd (X-SLURM-USER-NAME); must be a Slurm operator to list every job.").Checked(func() error {
		if c.RestdURL != "" && c.RestdUser == "" {
			return setting.Invalid(KeyRestdUser, "", "required with slurm.restd.url")
		}
		return nil
	})
	s.String(&c.RestdTokenFile, KeyRestdTokenFile, "", "File holding slurmrestd's JWT (X-SLURM-USER-TOKEN), re-read before each request.").Checked(func() error {
		if c.RestdURL != "" && c.RestdTokenFile == "" {
			return setting.Invalid(KeyRestdTokenFile, "", "required with slurm.restd.url")
		}
		return nil
	})
	s.String(&c.RestdVersion, KeyRestdVersion, "auto", "slurmrestd data_parser version: auto (the newest it serves of "+RestdVersions[0]+" to "+RestdVersions[len(RestdVersions)-1]+": 26.05 serves v0.0.45, 22.05 v0.0.38) or a fixed one, e.g. "+RestdVersions[0]+".").Checked(func() error {
		if !ValidRestdVersion(c.RestdVersion) {
			return setting.Invalid(KeyRestdVersion, c.RestdVersion, "want auto or one of "+strings.Join(RestdVersions, ", "))
		}
		return nil
	})
}

// Open returns the source the settings pick for the units of cluster:
// slurmrestd when slurm.source is restd, or auto with slurm.restd.url
// set; sacct when it is sacct (which must be found), or auto and sacct is
// found; nil for none, or auto with neither.
func (c *Settings) Open(cluster string) (feed.Source, error) {
	restd := &Restd{URL: c.RestdURL, User: c.RestdUser, TokenFile: c.RestdTokenFile, Cluster: cluster, Version: c.RestdVersion}
	sacct := &Sacct{Path: c.SacctPath, Cluster: cluster}
	switch c.Source {
	case "none":
		return nil, nil
	case "restd":
		return restd, nil
	case "sacct":
		if _, err := exec.LookPath(c.SacctPath); err != nil {
			return nil, fmt.Errorf("%s %q: %w", KeySacctPath, c.SacctPath, err)
		}
		return sacct, nil
	}
	if c.RestdURL != "" {
		return restd, nil
	}
	if _, err := exec.LookPath(c.SacctPath); err == nil {
		return sacct, nil
	}
	return nil, nil
}
