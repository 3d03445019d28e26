// Package feed copies a batch scheduler's job metadata (Slurm's sacct or
// slurmrestd, PBS's qstat) into the units store at a slow pace, from a
// cursor the store keeps, so that a restart neither loses nor re-reads
// more than Skew. Each scheduler's package parses its own output; the
// reading loop is this one.
package feed

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/units"
)

// Source lists the jobs active at some time since a given time.
type Source interface {
	Jobs(ctx context.Context, since time.Time) ([]units.Unit, error)
	Name() string
}

// Store is what the feeder needs of the units store.
type Store interface {
	Cursor(ctx context.Context, name string) (time.Time, bool, error)
	UpsertJobs(ctx context.Context, cursor string, at time.Time, jobs []units.Unit) error
}

// Skew is read again before the cursor, for clocks that differ between
// this server and the scheduler's and for records written late.
const Skew = time.Minute

// Config says whose metadata a Feeder reads and how often.
type Config struct {
	// Scheduler names the scheduler in errors and logs ("Slurm", "PBS").
	Scheduler string
	// Cursor is the store cursor of this feeder: one per scheduler, so
	// that a site running two reads each at its own pace.
	Cursor string
	// Interval is the time between reads; the first read goes Lookback
	// back.
	Interval, Lookback time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Feeder copies a scheduler's job metadata into the store.
type Feeder struct {
	src Source
	st  Store
	c   Config
	log *zap.Logger
}

// New reads src into st as c says.
func New(src Source, st Store, c Config, log *zap.Logger) *Feeder {
	if log == nil {
		log = zap.NewNop()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return &Feeder{src: src, st: st, c: c, log: log}
}

// Sync reads the jobs active since the cursor and stores them, moving the
// cursor to the time the read began, in one transaction.
func (f *Feeder) Sync(ctx context.Context) (int, error) {
	began := f.c.Now()
	since, ok, err := f.st.Cursor(ctx, f.c.Cursor)
	if err != nil {
		return 0, err
	}
	if !ok {
		since = began.Add(-f.c.Lookback)
	}
	jobs, err := f.src.Jobs(ctx, since.Add(-Skew))
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", f.c.Scheduler, f.src.Name(), err)
	}
	if err := f.st.UpsertJobs(ctx, f.c.Cursor, began, jobs); err != nil {
		return 0, err
	}
	return len(jobs), nil
}

// Run syncs every interval until ctx ends.
func (f *Feeder) Run(ctx context.Context) error {
	for {
		if n, err := f.Sync(ctx); err != nil && ctx.Err() == nil {
			f.log.Warn("reading "+f.c.Scheduler+" job metadata failed; retrying at the next interval", zap.String("source", f.src.Name()), zap.Error(err))
		} else if err == nil {
			f.log.Debug("read "+f.c.Scheduler+" job metadata", zap.String("source", f.src.Name()), zap.Int("jobs", n))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(f.c.Interval):
		}
	}
}
