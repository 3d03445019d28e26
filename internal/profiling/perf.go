package profiling

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/wattrace/wattrace/pkg/reading"
	"golang.org/x/sys/unix"
)

// perfBitInheritThread is perf_event_attr.inherit_thread (bit 35 of the
// flags word, Linux 5.13+), which x/sys/unix does not name yet. With
// inherit it makes new threads inherit the counter but not new processes
// (fork without CLONE_THREAD).
const perfBitInheritThread = 1 << 35

// rawCount is one read(2) of a counter opened with
// PERF_FORMAT_TOTAL_TIME_ENABLED|PERF_FORMAT_TOTAL_TIME_RUNNING.
type rawCount struct {
	Value   uint64
	Enabled uint64 // ns the event was enabled
	Running uint64 // ns it was actually on a PMU counter
}

// Scaled extrapolates the count over the time the event was enabled. When
// more events are requested than the PMU has counters, the kernel
// multiplexes them and each counts only part of the time; value ×
// enabled/running is the kernel-documented estimate (perf stat does the
// same). An event that never ran (running 0) has no estimate and counts 0
// rather than an infinity. Software events always run, so their scale is 1.
func (r rawCount) Scaled() float64 {
	switch {
	case r.Running == 0:
		return 0
	case r.Running >= r.Enabled:
		return float64(r.Value)
	}
	return float64(r.Value) * (float64(r.Enabled) / float64(r.Running))
}

// counterOps is the kernel interface the profiler needs. It is an
// interface so that the bookkeeping (opt-in, limits, exits, unavailable
// events) is tested without root or a PMU.
type counterOps interface {
	// open counts ev on thread tid (0: the calling thread) on any CPU.
	open(ev reading.PerfEvent, tid int, inheritThread bool) (int, error)
	read(fd int) (rawCount, error)
	close(fd int) error
}

// kernelOps is counterOps through perf_event_open(2).
type kernelOps struct{}

func (kernelOps) open(ev reading.PerfEvent, tid int, inheritThread bool) (int, error) {
	attr := unix.PerfEventAttr{
		Type:        ev.Type,
		Config:      ev.Config,
		Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Read_format: unix.PERF_FORMAT_TOTAL_TIME_ENABLED | unix.PERF_FORMAT_TOTAL_TIME_RUNNING,
		// Kernel time is counted: the energy a process causes includes
		// its system calls. exclude_hv only matters under a hypervisor
		// that exposes its own time, which is not the process's.
		Bits: unix.PerfBitExcludeHv,
	}
	if inheritThread {
		attr.Bits |= unix.PerfBitInherit | perfBitInheritThread
	}
	fd, err := unix.PerfEventOpen(&attr, tid, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return -1, err
	}
	return fd, nil
}

func (kernelOps) read(fd int) (rawCount, error) {
	var b [24]byte
	n, err := unix.Read(fd, b[:])
	if err != nil {
		return rawCount{}, fmt.Errorf("read perf counter: %w", err)
	}
	if n != len(b) {
		return rawCount{}, fmt.Errorf("read perf counter: %d bytes, want %d", n, len(b))
	}
	return rawCount{
		Value:   binary.NativeEndian.Uint64(b[0:]),
		Enabled: binary.NativeEndian.Uint64(b[8:]),
		Running: binary.NativeEndian.Uint64(b[16:]),
	}, nil
}

func (kernelOps) close(fd int) error { return unix.Close(fd) }

// unsupported reports whether an open error means the event does not
// exist here (no PMU, as in most VMs: ENOENT; an event the CPU or kernel
// lacks: EOPNOTSUPP, ENODEV; a cache op/result combination the CPU does not
// define: EINVAL). Such an event is given up on, not retried every scan.
func unsupported(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP) ||
		errors.Is(err, unix.ENODEV) || errors.Is(err, unix.EINVAL)
}
