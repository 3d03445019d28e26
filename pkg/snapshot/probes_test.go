package snapshot

import "testing"

func TestProbeStatsArithmetic(t *testing.T) {
	prev := ProbeStats{PageCacheAccessed: 10, UDPRecvs: 5, Counters: [MaxCounters]uint64{7}}
	cur := ProbeStats{PageCacheAccessed: 25, UDPRecvs: 2, Counters: [MaxCounters]uint64{9}}
	d := cur.Delta(prev)
	if d.PageCacheAccessed != 15 || d.UDPRecvs != 2 || d.Counters[0] != 2 {
		t.Errorf("delta %+v", d)
	}
	var sum ProbeStats
	sum.Add(d)
	sum.Add(d)
	if sum.PageCacheAccessed != 30 || sum.Counters[0] != 4 || sum.BlockWrites != 0 {
		t.Errorf("sum %+v", sum)
	}
	if n := len(new(ProbeStats).fields()); n != 17+MaxCounters {
		t.Errorf("fields() covers %d counters; update it with the struct", n)
	}
}
