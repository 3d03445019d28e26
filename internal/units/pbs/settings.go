package pbs

import (
	"fmt"
	"os/exec"
	"time"

	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/internal/units/feed"
)

// The pbs.* keys (wattrace-api's).
const (
	KeySource    = "pbs.source"
	KeyInterval  = "pbs.interval"
	KeyLookback  = "pbs.lookback"
	KeyQstatPath = "pbs.qstat.path"
)

// Sources are the allowed values of pbs.source. There is no auto: Slurm's
// Torque wrappers install a qstat of their own, which a Slurm site must
// not be read through.
var Sources = []string{"none", "qstat"}

// Settings say where PBS Professional and OpenPBS job metadata comes from
// and how often it is read (Open, NewFeeder).
type Settings struct {
	// Source: qstat or none.
	Source    string
	Interval  time.Duration
	Lookback  time.Duration
	QstatPath string
}

// Declare declares pbs.*, bound to c.
func (c *Settings) Declare(s *setting.Set) {
	s.Enum(&c.Source, KeySource, "none", Sources, "PBS Professional / OpenPBS job metadata: none or qstat (qstat -x -f -F json).")
	s.AnyDuration(&c.Interval, KeyInterval, 15*time.Minute, "Time between reads of PBS's job history.").Checked(func() error {
		switch {
		case c.Interval <= 0:
			return setting.Invalid(KeyInterval, c.Interval, "must be positive")
		case c.Interval < time.Minute:
			return setting.Invalid(KeyInterval, c.Interval, "at least 1m: qstat -x lists the server's whole job history")
		}
		return nil
	})
	s.AnyDuration(&c.Lookback, KeyLookback, 24*time.Hour, "How far back the first PBS read goes.").Checked(func() error {
		if c.Lookback <= 0 {
			return setting.Invalid(KeyLookback, c.Lookback, "must be positive")
		}
		return nil
	})
	s.String(&c.QstatPath, KeyQstatPath, "qstat", "The qstat command of PBS.")
}

// Open returns the qstat source for the units of cluster, nil when
// pbs.source is none; qstat must be found.
func (c *Settings) Open(cluster string) (feed.Source, error) {
	if c.Source != "qstat" {
		return nil, nil
	}
	if _, err := exec.LookPath(c.QstatPath); err != nil {
		return nil, fmt.Errorf("%s %q: %w", KeyQstatPath, c.QstatPath, err)
	}
	return &Qstat{Path: c.QstatPath, Cluster: cluster}, nil
}
