package stats

import (
	"fmt"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/carbon"
	"github.com/wattrace/wattrace/pkg/reading"
)

// BenchmarkStepEmissions is the cost of one interval over 1,000 cgroups
// and 1,000 processes on two zones, without and with emissions.
func BenchmarkStepEmissions(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("emissions=%v", on), func(b *testing.B) {
			src := &fakeSource{}
			m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}, {Zone: "dram", Socket: 0}}}
			paths := names{}
			for i := uint64(1); i <= 1000; i++ {
				paths[i] = fmt.Sprintf("/bench/cg-%04d", i)
				src.add(i, uint32(i), int(i%2), 0)
			}
			var opts []Option
			if on {
				p := carbon.NewProvider(carbon.Constant{GramsPerKWh: 436}, carbon.ProviderOptions{})
				if err := p.Poll(b.Context()); err != nil {
					b.Fatal(err)
				}
				opts = append(opts, WithEmissions(carbon.NewChain(0, p)))
			}
			l, err := New(Config{Interval: time.Second, Retention: time.Minute, IdlePolicy: "cpu", CPUs: 2,
				IdleWatts: map[string]float64{"package": 5, "dram": 1}}, src, m, paths, nil, opts...)
			if err != nil {
				b.Fatal(err)
			}
			t0 := time.Unix(0, 0)
			l.Step(t0)
			b.ResetTimer()
			for n := 0; n < b.N; n++ {
				for i := range src.r.Cgroups {
					src.r.Cgroups[i].CPUNs += 1e6
				}
				for i := range src.r.Processes {
					src.r.Processes[i].CPUNs += 1e6
				}
				m.samples[0].Joules += 20
				m.samples[1].Joules += 4
				t0 = t0.Add(time.Second)
				l.Step(t0)
			}
		})
	}
}
