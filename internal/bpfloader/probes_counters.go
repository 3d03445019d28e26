package bpfloader

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/wattrace/wattrace/internal/cpulist"
	"github.com/wattrace/wattrace/pkg/reading"
)

// CounterEvent is a perf event the context-switch program reads on every
// CPU (perf_event_open type and config).
type CounterEvent struct {
	Name   string
	Type   uint32
	Config uint64
}

// DefaultCounters are the hardware counters wattrace reads when the CPU
// has them. Virtual machines and CPUs without a PMU have none: perf then
// answers ENOENT and the counters probe stays off.
var DefaultCounters = []CounterEvent{
	{"cycles", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CPU_CYCLES},
	{"instructions", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_INSTRUCTIONS},
	{"cache_misses", unix.PERF_TYPE_HARDWARE, unix.PERF_COUNT_HW_CACHE_MISSES},
}

// counterSet is the perf events opened on every online CPU, one slot per
// event that opened everywhere.
type counterSet struct {
	names []string
	fds   [][]int // [slot][i], on cpus[i]
	cpus  []int
}

// openCounters opens each event on every online CPU. An event that fails
// on any CPU is left out with a log line; nil when none opened.
func openCounters(events []CounterEvent, ncpu int, log *zap.Logger) (*counterSet, error) {
	cpus, err := onlineCPUs(ncpu)
	if err != nil {
		return nil, err
	}
	cs := &counterSet{cpus: cpus}
	for _, ev := range events {
		if len(cs.names) == reading.MaxCounters {
			log.Warn("counter left out: too many counters", zap.String("counter", ev.Name), zap.Int("max", reading.MaxCounters))
			continue
		}
		fds, err := openOnCPUs(ev, cpus)
		if err != nil {
			log.Info("counter unavailable", zap.String("counter", ev.Name), zap.Error(err))
			continue
		}
		cs.names = append(cs.names, ev.Name)
		cs.fds = append(cs.fds, fds)
	}
	if len(cs.names) == 0 {
		return nil, nil
	}
	return cs, nil
}

func openOnCPUs(ev CounterEvent, cpus []int) ([]int, error) {
	attr := unix.PerfEventAttr{
		Type:   ev.Type,
		Config: ev.Config,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
	}
	fds := make([]int, 0, len(cpus))
	for _, cpu := range cpus {
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			for _, fd := range fds {
				unix.Close(fd)
			}
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EOPNOTSUPP) {
				return nil, fmt.Errorf("no such event on this CPU (no PMU, or not exposed to this VM): %w", err)
			}
			return nil, fmt.Errorf("perf_event_open on cpu %d: %w", cpu, err)
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// install puts slot n's events in map counter_events<n>, at their CPU.
func (cs *counterSet) install(maps map[string]*ebpf.Map) error {
	for slot, fds := range cs.fds {
		m := maps["counter_events"+strconv.Itoa(slot)]
		for i, fd := range fds {
			if err := m.Put(uint32(cs.cpus[i]), uint32(fd)); err != nil {
				return fmt.Errorf("install counter %s of cpu %d: %w", cs.names[slot], cs.cpus[i], err)
			}
		}
	}
	return nil
}

func (cs *counterSet) close() {
	for _, fds := range cs.fds {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	cs.fds = nil
}

// onlineCPUs lists the online CPUs (a CPU brought online later gets no
// counters until the next load).
func onlineCPUs(ncpu int) ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		cpus := make([]int, ncpu)
		for i := range cpus {
			cpus[i] = i
		}
		return cpus, nil
	}
	return parseCPUList(strings.TrimSpace(string(b)), ncpu)
}

// parseCPUList parses a kernel CPU list such as "0-3,5", keeping CPUs
// below ncpu.
func parseCPUList(s string, ncpu int) ([]int, error) {
	all, err := cpulist.Parse(s)
	if err != nil {
		return nil, err
	}
	cpus := all[:0]
	for _, c := range all {
		if c < ncpu {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// CounterByName returns the perf event of a counter name: the hardware
// counters of DefaultCounters, or cpu_clock, a software event that stands
// in for them where the CPU has no PMU (it counts nanoseconds on CPU, so it
// exercises the same path with a known expected value).
func CounterByName(name string) (CounterEvent, error) {
	for _, c := range DefaultCounters {
		if c.Name == name {
			return c, nil
		}
	}
	if name == "cpu_clock" {
		return CounterEvent{"cpu_clock", unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_CPU_CLOCK}, nil
	}
	return CounterEvent{}, fmt.Errorf("unknown counter %q: allowed cycles, instructions, cache_misses, cpu_clock", name)
}
