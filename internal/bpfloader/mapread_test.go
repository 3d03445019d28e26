package bpfloader

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/reading"
)

// statsMap makes a hash map shaped like cgroup_stats (same key, value,
// flags and size) holding n entries, entry i's first counter being i+1.
func statsMap(t testing.TB, n int) *ebpf.Map {
	t.Helper()
	testenv.RequireRoot(t)
	m, err := ebpf.NewMap(&ebpf.MapSpec{
		Type: ebpf.Hash, KeySize: 8, ValueSize: uint32(len(probesStats{}.V) * 8),
		MaxEntries: 16384, Flags: 1, // BPF_F_NO_PREALLOC, as the probes' maps
	})
	if err != nil {
		t.Fatalf("create map: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	keys := make([]uint64, n)
	vals := make([]probesStats, n)
	for i := range keys {
		keys[i] = uint64(i) * 7919 // spread over the buckets unevenly
		vals[i].V[0] = uint64(i) + 1
		vals[i].V[20] = uint64(i) * 3
	}
	if _, err := m.BatchUpdate(keys, vals, nil); err != nil {
		t.Fatalf("fill map: %v", err)
	}
	return m
}

// Batched, entry by entry, and batched from a batch of one (every bucket
// with two or more entries is refused with ENOSPC until the batch grows):
// each read sees every entry once with its value.
func TestMapReaderReadsEveryEntryOnce(t *testing.T) {
	const n = 3000 // several batches
	m := statsMap(t, n)
	for _, tc := range []struct {
		name string
		r    mapReader[uint64, probesStats]
	}{
		{name: "batch"},
		{name: "iterate", r: mapReader[uint64, probesStats]{iterate: true}},
		{name: "batch of one", r: mapReader[uint64, probesStats]{keys: make([]uint64, 1), vals: make([]probesStats, 1)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for pass := 0; pass < 2; pass++ { // the buffers are reused
				seen := map[uint64]int{}
				err := tc.r.each(m, func(k *uint64, v *probesStats) {
					seen[*k]++
					i := *k / 7919
					if v.V[0] != i+1 || v.V[20] != i*3 {
						t.Errorf("key %d: counters %d, %d; want %d, %d", *k, v.V[0], v.V[20], i+1, i*3)
					}
				})
				if err != nil {
					t.Fatal(err)
				}
				if len(seen) != n {
					t.Fatalf("pass %d: %d distinct keys, want %d", pass, len(seen), n)
				}
				for k, c := range seen {
					if c != 1 {
						t.Fatalf("key %d seen %d times", k, c)
					}
				}
			}
			if tc.name == "batch of one" && len(tc.r.keys) < 2 {
				t.Errorf("the batch never grew past one entry")
			}
			if tc.name != "iterate" && tc.r.iterate {
				t.Errorf("fell back to iteration on a kernel with batch lookups")
			}
		})
	}
}

// An empty map reads as nothing, without error, either way.
func TestMapReaderEmpty(t *testing.T) {
	m := statsMap(t, 0)
	for _, it := range []bool{false, true} {
		r := mapReader[uint64, probesStats]{iterate: it}
		n := 0
		if err := r.each(m, func(*uint64, *probesStats) { n++ }); err != nil || n != 0 {
			t.Errorf("iterate=%v: %d entries, err %v", it, n, err)
		}
	}
}

// BenchmarkMapRead reads a cgroup_stats-shaped map of 2,000 entries (a node
// with a few thousand cgroups) in batches and entry by entry, as the
// probes' and the exit maps' reads did before.
func BenchmarkMapRead(b *testing.B) {
	m := statsMap(b, 2000)
	for _, mode := range []struct {
		name    string
		iterate bool
	}{{"batch", false}, {"iterate", true}} {
		b.Run(mode.name, func(b *testing.B) {
			r := mapReader[uint64, probesStats]{iterate: mode.iterate}
			var sum uint64
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if err := r.each(m, func(_ *uint64, v *probesStats) { sum += v.V[0] }); err != nil {
					b.Fatal(err)
				}
			}
			if sum != uint64(b.N)*2000*2001/2 {
				b.Fatalf("sum %d", sum)
			}
		})
	}
}

// deleteAll deletes the keys it is given, skipping those already gone
// (which stop a kernel batch), and no others.
func TestDeleteAll(t *testing.T) {
	m := statsMap(t, 1000) // keys i*7919, i < 1000
	var del []uint64
	for i := uint64(0); i < 1000; i += 3 {
		del = append(del, i*7919)
		if i%30 == 0 {
			del = append(del, i*7919+1) // never in the map
		}
	}
	del = append(del, 1) // gone, last
	if err := deleteAll(m, del); err != nil {
		t.Fatal(err)
	}
	var r mapReader[uint64, probesStats]
	left := 0
	err := r.each(m, func(k *uint64, _ *probesStats) {
		left++
		if (*k/7919)%3 == 0 {
			t.Errorf("key %d left in the map", *k)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := 1000 - 334; left != want {
		t.Errorf("%d entries left, want %d", left, want)
	}
	if err := deleteAll[uint64](m, nil); err != nil {
		t.Errorf("deleting nothing: %v", err)
	}
}

// Forget deletes the entries of the processes and cgroups it is given,
// whether or not each has one, and leaves the others.
func TestProbesForget(t *testing.T) {
	p, _ := loadProbesForTest(t, ProbeOptions{})
	pm, cm := p.maps["proc_stats"], p.maps["cgroup_stats"]
	cg := func(i uint32) uint64 { return 1<<62 + uint64(i) }
	var s probesStats
	s.V[0] = 1
	for i := uint32(1); i <= 6; i++ {
		// pids far above pid_max, cgroup ids no kernel hands out: the
		// probes never write these entries themselves.
		if err := pm.Put(probesProcKey{Tgid: 1<<30 + i, Start: 7}, s); err != nil {
			t.Fatal(err)
		}
		if err := cm.Put(cg(i), s); err != nil {
			t.Fatal(err)
		}
	}
	procs := []reading.ProcKey{{PID: 1<<30 + 1, StartTime: 7}, {PID: 1<<30 + 9, StartTime: 7}, {PID: 1<<30 + 3, StartTime: 7}, {PID: 1<<30 + 5, StartTime: 8}}
	if err := p.Forget(procs, []uint64{cg(2), cg(99), cg(4)}); err != nil {
		t.Fatal(err)
	}
	for i := uint32(1); i <= 6; i++ {
		var v probesStats
		gone := i == 1 || i == 3
		err := pm.Lookup(probesProcKey{Tgid: 1<<30 + i, Start: 7}, &v)
		if gone != (err != nil) {
			t.Errorf("proc_stats entry of pid 2^30+%d: lookup error %v, want gone=%v", i, err, gone)
		}
		gone = i == 2 || i == 4
		err = cm.Lookup(cg(i), &v)
		if gone != (err != nil) {
			t.Errorf("cgroup_stats entry 2^62+%d: lookup error %v, want gone=%v", i, err, gone)
		}
		pm.Delete(probesProcKey{Tgid: 1<<30 + i, Start: 7})
		cm.Delete(cg(i))
	}
}
