package power

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/reading"
)

// StealReader returns the CPU time the hypervisor has stolen from this
// machine since boot, all CPUs together: time its vCPUs were ready to run
// while the host ran something else.
type StealReader func() (time.Duration, error)

// ProcStatSteal reads the steal column of procfsRoot/stat's "cpu" line
// (USER_HZ ticks, 100 a second on every architecture that exports them).
// It reads the first line only: procfs's Stat parses every line (a line
// per CPU and the interrupt counters, thousands of numbers on a large
// cloud VM) at every step, for one number.
func ProcStatSteal(procfsRoot string) (StealReader, error) {
	path := filepath.Join(procfsRoot, "stat")
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("steal: %w", err)
	}
	return func() (time.Duration, error) {
		ticks, err := readStealTicks(path)
		if err != nil {
			return 0, err
		}
		// Ticks are whole numbers: the check is of their range, as
		// seconds then as nanoseconds.
		s := float64(ticks) / 100
		if s > float64(math.MaxInt64)/1e9 {
			return 0, reading.Reject(reading.OutOfRange, s, "steal seconds in %s", path)
		}
		return time.Duration(ticks) * 10 * time.Millisecond, nil
	}, nil
}

// readStealTicks returns the eighth number of path's first line, which
// must be the all-CPU "cpu" line: user nice system idle iowait irq softirq
// steal.
func readStealTicks(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("steal: %w", err)
	}
	defer f.Close()
	// The line is 10 numbers of at most 20 digits: it fits, with its name.
	var b [512]byte
	n, err := io.ReadFull(f, b[:])
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return 0, fmt.Errorf("steal: read %s: %w", path, err)
	}
	line, _, found := bytes.Cut(b[:n], []byte{'\n'})
	fields := bytes.Fields(line)
	if !found || len(fields) < 9 || string(fields[0]) != "cpu" {
		return 0, fmt.Errorf("steal: %s does not start with a cpu line of at least 8 numbers: %q", path, line)
	}
	ticks, err := strconv.ParseUint(string(fields[8]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("steal: %s: %w", path, err)
	}
	return ticks, nil
}

// steal turns a StealReader's counter into each interval's stolen
// fraction: stolen time over the vCPUs' time in the interval, 0..1. A
// reading that cannot be read, goes back or grows faster than every vCPU
// stolen all the time is rejected, counted and logged, and that interval
// counts as nothing stolen (the estimate as without steal).
type steal struct {
	mu   sync.Mutex
	read StealReader
	cpus int
	// clock is the load's time: the sum of the intervals observed, so
	// that steal is measured over the same windows as the load (the
	// stats loop's intervals), whatever the wall clock did between calls.
	clock   time.Time
	counter reading.Counter
	rejects *reading.Rejects
	last    float64 // the last interval's fraction
}

func newSteal(read StealReader, cpus int, log *zap.Logger) (*steal, error) {
	v, err := read()
	if err == nil {
		_, err = (&reading.Counter{}).Observe(float64(v), time.Unix(0, 0))
	}
	if err != nil {
		return nil, fmt.Errorf("steal: first reading: %w", err)
	}
	s := &steal{read: read, cpus: cpus, clock: time.Unix(0, 0), rejects: reading.NewRejects("estimator", log),
		counter: reading.Counter{MaxRate: float64(cpus) * 1e9, Slack: reading.CPUTimeSlack, NeverResets: true}}
	s.observe(0) // the baseline
	return s, nil
}

// observe reads the counter at the end of an interval of dt and returns
// the fraction of the vCPUs' time stolen since the last accepted reading
// (0 for a baseline, dt <= 0, or when the reading is rejected): over dt,
// or over the intervals since that reading after a rejected one.
func (s *steal) observe(dt time.Duration) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if dt > 0 {
		s.clock = s.clock.Add(dt)
	} else {
		// No interval (the stats loop's baseline): this reading is the
		// new baseline, whatever was stolen before it.
		s.counter.Reset()
	}
	t := s.clock
	v, err := s.read()
	if err != nil {
		s.rejects.Add(reading.Reject(reading.Unreadable, 0, "%v", err), "steal time")
		s.last = 0
		return 0
	}
	d, err := s.counter.Observe(float64(v), t)
	if err != nil {
		s.rejects.Add(err, "steal time")
		s.last = 0
		return 0
	}
	// Since is when the reading d was measured from was taken (zero for
	// the baseline, whose d is 0).
	span := t.Sub(s.counter.Since()).Seconds() * float64(s.cpus)
	s.last = 0
	if span > 0 && !s.counter.Since().IsZero() {
		s.last = math.Min(math.Max(d/1e9/span, 0), 1)
	}
	return s.last
}

// SetSteal makes the estimator a VM's: each Advance reads the time the
// hypervisor stole from the guest's cpus vCPUs and takes it out of the
// load signal and of the dynamic energy (see Advance, and docs/vm.md).
// Call it before the first Advance. It fails, leaving the estimator as it
// was, when the first reading fails or is not a plausible counter.
func (e *Estimator) SetSteal(read StealReader, cpus int, log *zap.Logger) error {
	if read == nil || cpus < 1 {
		return fmt.Errorf("power: steal needs a reader and at least one vCPU (%d)", cpus)
	}
	st, err := newSteal(read, cpus, log)
	if err != nil {
		return fmt.Errorf("power: %w", err)
	}
	e.mu.Lock()
	e.steal = st
	e.mu.Unlock()
	return nil
}

// StolenFraction is the share of the vCPUs' time the hypervisor stole in
// the last interval, and whether the estimator reads steal at all.
func (e *Estimator) StolenFraction() (float64, bool) {
	e.mu.Lock()
	st := e.steal
	e.mu.Unlock()
	if st == nil {
		return 0, false
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.last, true
}
