package reading

import (
	"reflect"
	"testing"
)

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
	// Fields covers every counter: each uint64 field and each counter.
	want := MaxCounters
	st := reflect.TypeOf(ProbeStats{})
	for i := 0; i < st.NumField(); i++ {
		if st.Field(i).Type.Kind() == reflect.Uint64 {
			want++
		}
	}
	if n := len(new(ProbeStats).Fields()); n != want {
		t.Errorf("Fields() covers %d counters, the struct has %d; update it with the struct", n, want)
	}
	seen := map[*uint64]bool{}
	for i, f := range new(ProbeStats).Fields() {
		if f == nil || seen[f] {
			t.Errorf("Fields()[%d] is nil or repeated", i)
		}
		seen[f] = true
	}
}
