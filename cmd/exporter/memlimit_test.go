package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

// peakHeap holds live bytes in small objects and allocates garbage beside
// them, and returns the largest heap in use (objects and their spans)
// seen meanwhile.
func peakHeap(live, garbage int) (held [][]byte, peak uint64) {
	for n := 0; n < live; n += 1 << 10 {
		held = append(held, make([]byte, 1<<10))
	}
	runtime.GC()
	var ms runtime.MemStats
	var sink []byte
	for n := 0; n < garbage; n += 64 << 10 {
		sink = make([]byte, 64<<10)
		sink[0] = 1
		if n%(1<<20) == 0 {
			runtime.ReadMemStats(&ms)
			peak = max(peak, ms.HeapInuse)
		}
	}
	_ = sink
	return held, peak
}

// With the limit, the heap grows by the headroom above what is live before
// it is collected, not by as much as what is live (GOGC=100): with 24 MiB
// live and 200 MiB of garbage allocated beside it, the heap in use peaks
// near the limit (what is live × 1.25 and the runtime's own memory),
// against about twice what is live without. The limit follows the live
// heap, set again after every collection.
func TestMemoryLimitFollowsLive(t *testing.T) {
	if debug.SetGCPercent(100) != 100 {
		t.Fatal("GOGC is not 100 in this test binary")
	}
	const live, garbage = 24 << 20, 200 << 20
	held, without := peakHeap(live, garbage)
	runtime.KeepAlive(held)
	held = nil
	runtime.GC()
	// What the test binary holds besides (other tests of the package
	// leave caches and goroutines): part of the live heap the limit
	// follows.
	base := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(base)
	other := int64(base[0].Value.Uint64())

	m, stop := startMemoryLimit(0.25)
	if m == nil {
		t.Fatal("no limit set with a headroom of 0.25 and no GOMEMLIMIT")
	}
	held, with := peakHeap(live, garbage)
	sets := m.sets.Load()
	runtime.GC()
	// The cleanup that sets the limit runs in its own goroutine after
	// the collection.
	for deadline := time.Now().Add(5 * time.Second); m.sets.Load() == sets && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	limit := m.limit.Load()
	runtime.KeepAlive(held)
	stop()
	t.Logf("%d MiB live (%.1f MiB more the binary's): heap in use peaked at %.1f MiB with the limit (last set to %.1f MiB), %.1f MiB without",
		live>>20, float64(other)/(1<<20), float64(with)/(1<<20), float64(limit)/(1<<20), float64(without)/(1<<20))
	// The live heap is the test's 24 MiB and what the test binary holds
	// besides; the limit adds the runtime's own memory (its metadata,
	// stacks, fragmentation: a few MiB).
	if want := (live + other) * 5 / 4; limit < want || limit > want+12<<20 {
		t.Errorf("limit %.1f MiB with %.1f MiB live and a headroom of 0.25, want %.1f MiB and the runtime's own memory",
			float64(limit)/(1<<20), float64(live+other)/(1<<20), float64(want)/(1<<20))
	}
	if with > uint64(limit)+4<<20 || float64(with) > 0.85*float64(without) {
		t.Errorf("heap in use peaked at %.1f MiB under a limit of %.1f MiB (%.1f MiB without)", float64(with)/(1<<20), float64(limit)/(1<<20), float64(without)/(1<<20))
	}
	if float64(without) < 1.6*live {
		t.Errorf("without the limit the heap peaked at %.1f MiB, %d MiB live: GOGC=100 should let it near twice that", float64(without)/(1<<20), live>>20)
	}
	if got := debug.SetMemoryLimit(-1); got != 1<<63-1 {
		t.Errorf("limit %d left after stop, want none", got)
	}

	t.Setenv("GOMEMLIMIT", "1GiB")
	if m, stop := startMemoryLimit(0.25); m != nil {
		stop()
		t.Error("a limit was set over the operator's GOMEMLIMIT")
	}
	if m, _ := startMemoryLimit(0); m != nil {
		t.Error("a limit was set with a headroom of 0")
	}
}
