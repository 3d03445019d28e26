package profiling

import (
	"testing"

	"github.com/wattrace/wattrace/pkg/reading"
	"golang.org/x/sys/unix"
)

func TestEvents(t *testing.T) {
	if n := len(Events(reading.PerfKindHardware)); n != 10 {
		t.Errorf("%d hardware events, want 10", n)
	}
	if n := len(Events(reading.PerfKindSoftware)); n != 9 {
		t.Errorf("%d software events, want 9", n)
	}
	// 7 caches × 3 ops × 2 results.
	if n := len(Events(reading.PerfKindCache)); n != 42 {
		t.Errorf("%d cache events, want 42", n)
	}
	names := map[string]bool{}
	for _, k := range []string{reading.PerfKindHardware, reading.PerfKindSoftware, reading.PerfKindCache} {
		for _, e := range Events(k) {
			if names[e.Name] {
				t.Errorf("event name %s repeats", e.Name)
			}
			names[e.Name] = true
		}
	}

	evs, err := ParseEvents(reading.PerfKindCache, []string{"L1D_read_miss", "llc_write_access", " l1d_read_miss "})
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 {
		t.Fatalf("got %d events, want 2 (duplicates dropped)", len(evs))
	}
	// perf_event_open(2): config = cache id | op << 8 | result << 16.
	if e := evs[0]; e.Name != "l1d_read_miss" || e.Type != unix.PERF_TYPE_HW_CACHE || e.Config != 0x10000 {
		t.Errorf("l1d_read_miss = %+v, want type %d config 0x10000", e, unix.PERF_TYPE_HW_CACHE)
	}
	if e := evs[1]; e.Config != 0x102 {
		t.Errorf("llc_write_access config %#x, want 0x102", e.Config)
	}
	sw, err := ParseEvents(reading.PerfKindSoftware, []string{"task_clock", "major_faults"})
	if err != nil {
		t.Fatal(err)
	}
	if sw[0].Unit != "ns" || sw[0].Config != unix.PERF_COUNT_SW_TASK_CLOCK || sw[1].Unit != "" || sw[1].Type != unix.PERF_TYPE_SOFTWARE {
		t.Errorf("software events %+v", sw)
	}
	if _, err := ParseEvents(reading.PerfKindHardware, []string{"task_clock"}); err == nil {
		t.Error("a software event accepted as hardware")
	}
	if _, err := ParseEvents("gpu", nil); err == nil {
		t.Error("unknown kind accepted")
	}
}
