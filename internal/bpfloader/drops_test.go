package bpfloader

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/reading"
)

// fill stores made-up entries until the map refuses more; it returns how
// many it stored.
func fill(t *testing.T, m *ebpf.Map, key func(i uint32) any) int {
	t.Helper()
	var zero probesStats
	for i := uint32(0); ; i++ {
		err := m.Update(key(i), &zero, ebpf.UpdateNoExist)
		if err == nil {
			continue
		}
		if errors.Is(err, ebpf.ErrKeyExist) {
			continue
		}
		if i == 0 {
			t.Fatalf("first update: %v", err)
		}
		return int(i)
	}
}

func dropsOf(t *testing.T, p *Probes) map[string]uint64 {
	t.Helper()
	ds, err := p.MapDrops()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, d := range ds {
		out[d.Map] = d.Drops
	}
	return out
}

// With proc_stats and cgroup_stats full, a process in a new cgroup that
// reads files can't get entries: its events are counted as drops of each
// map, which is what wattrace_bpf_map_drops_total exports.
func TestProbeMapFullCountsDrops(t *testing.T) {
	p, h := loadProbesForTest(t, ProbeOptions{Disable: []string{reading.ProbeCounters}})
	before := dropsOf(t, p)
	if len(before) != 2 {
		t.Fatalf("drops of %v, want proc_stats and cgroup_stats", before)
	}
	nProcs := fill(t, p.maps["proc_stats"], func(i uint32) any { return &probesProcKey{Tgid: 1<<31 + i, Start: uint64(i)} })
	nCgroups := fill(t, p.maps["cgroup_stats"], func(i uint32) any { k := uint64(1)<<62 + uint64(i); return &k })
	if nProcs < 32768 || nCgroups < 16384 {
		t.Logf("maps full after %d and %d new entries (others were there already)", nProcs, nCgroups)
	}
	dir := testenv.Cgroup(t, h.Mount, "drops")
	cmd := testenv.StartIn(t, dir, "/bin/sh", "-c", "for i in 1 2 3 4 5 6 7 8; do cat /etc/passwd /etc/group; done > /dev/null")
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	after := dropsOf(t, p)
	for _, m := range []string{"proc_stats", "cgroup_stats"} {
		if after[m] <= before[m] {
			t.Errorf("%s drops %d before filling it, %d after a process read files: want a rise", m, before[m], after[m])
		}
	}
	t.Logf("drops before %v, after %v", before, after)
}
