package main

import (
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"

	"github.com/wattrace/wattrace/internal/setting"
)

// keyMemoryHeadroom is runtime.memory-headroom, the one runtime.* setting.
const keyMemoryHeadroom = "runtime.memory-headroom"

// runtimeSettings are runtime.*: the Go runtime under the exporter.
type runtimeSettings struct {
	// MemoryHeadroom is the fraction of the live heap that the heap may
	// grow by before the garbage collector runs (startMemoryLimit); 0:
	// no limit, the heap grows to twice what is live (GOGC=100).
	MemoryHeadroom float64
}

// Declare declares runtime.*, bound to r.
func (r *runtimeSettings) Declare(s *setting.Set) {
	s.Float(&r.MemoryHeadroom, keyMemoryHeadroom, 0.5, "Soft memory limit above the live heap, as a fraction of it: after each garbage collection the limit is what is live times 1 + this (at least 4 MiB more) plus the runtime's own memory, instead of letting the heap grow to twice what is live (GOGC=100). 0 turns the limit off; GOMEMLIMIT, when set, overrides it.").Checked(func() error {
		if h := r.MemoryHeadroom; math.IsNaN(h) || h < 0 || h > 10 {
			return setting.Invalid(keyMemoryHeadroom, h, "want a fraction of the live heap from 0 (off) to 10")
		}
		return nil
	})
}

// minMemoryHeadroom is the least the heap may grow by above what is live
// before the garbage collector runs: below it a small heap would be
// collected at every few allocations.
const minMemoryHeadroom = 4 << 20

// memoryLimit keeps the Go runtime's soft memory limit (debug.SetMemoryLimit)
// at a headroom above what the last garbage collection found live. At the
// default GOGC=100 the heap grows to twice what is live before it is
// collected, and most of the exporter's memory is that growth: the live
// heap at 10,000 processes is about 13 MB and RSS was 46–50 MiB. The
// limit is reset after every collection, so it follows what is live as
// the node's tasks come and go; GOGC still bounds the heap where it is
// lower.
type memoryLimit struct {
	headroom float64
	samples  []metrics.Sample
	stopped  atomic.Bool
	// limit is the latest limit set and sets how many times it was, for
	// tests.
	limit atomic.Int64
	sets  atomic.Uint64
}

// The runtime/metrics read after each collection.
const (
	mLive     = "/gc/heap/live:bytes"
	mTotal    = "/memory/classes/total:bytes"
	mReleased = "/memory/classes/heap/released:bytes"
	mObjects  = "/memory/classes/heap/objects:bytes"
	mFree     = "/memory/classes/heap/free:bytes"
)

// startMemoryLimit keeps the soft memory limit at headroom (a fraction of
// the live heap) above what is live until stop is called; headroom 0, or
// GOMEMLIMIT set by the operator, leaves the runtime's limit alone.
func startMemoryLimit(headroom float64) (m *memoryLimit, stop func()) {
	if headroom <= 0 || os.Getenv("GOMEMLIMIT") != "" {
		return nil, func() {}
	}
	m = &memoryLimit{headroom: headroom}
	for _, name := range []string{mLive, mTotal, mReleased, mObjects, mFree} {
		m.samples = append(m.samples, metrics.Sample{Name: name})
	}
	m.set()
	m.arm()
	return m, func() {
		m.stopped.Store(true)
		debug.SetMemoryLimit(math.MaxInt64)
	}
}

// sentinel is an object whose only purpose is to be collected: its
// cleanup runs after the garbage collection that found it unreachable.
// Larger than the tiny allocator's 16 bytes, so that it is collected alone.
type sentinel [32]byte

// arm sets the limit again after the next garbage collection.
func (m *memoryLimit) arm() {
	runtime.AddCleanup(new(sentinel), func(m *memoryLimit) {
		if m.stopped.Load() {
			return
		}
		m.set()
		m.arm()
	}, m)
}

// set sets the limit from the last collection's live heap: what is live,
// plus the headroom, plus what the runtime holds besides the heap's objects
// and its free pages (stacks, its own metadata, fragmentation), which the
// limit counts too.
func (m *memoryLimit) set() {
	metrics.Read(m.samples)
	v := make(map[string]uint64, len(m.samples))
	for _, s := range m.samples {
		if s.Value.Kind() != metrics.KindUint64 {
			return // not this runtime's: leave the limit as it is
		}
		v[s.Name] = s.Value.Uint64()
	}
	live := v[mLive]
	used := v[mTotal] - v[mReleased] - v[mFree]
	if live == 0 || used < v[mObjects] {
		return
	}
	other := used - v[mObjects]
	limit := other + live + max(uint64(float64(live)*m.headroom), minMemoryHeadroom)
	if limit > math.MaxInt64 || m.stopped.Load() {
		return
	}
	debug.SetMemoryLimit(int64(limit))
	m.limit.Store(int64(limit))
	m.sets.Add(1)
}
