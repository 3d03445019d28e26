package carbon

import (
	"testing"
	"time"
)

// The stats loop takes the factor in force once per interval: it must stay
// far below a microsecond.
func BenchmarkChainFactor(b *testing.B) {
	rte := NewProvider(&stepper{now: time.Now, start: time.Now(), every: time.Hour, steps: []float64{50}}, ProviderOptions{})
	_ = rte.Poll(b.Context())
	ch := NewChain(time.Hour, rte, NewProvider(Constant{GramsPerKWh: 436}, ProviderOptions{}))
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ch.Factor(); !ok {
			b.Fatal("no factor")
		}
	}
}
