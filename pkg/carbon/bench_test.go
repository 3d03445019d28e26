package carbon

import (
	"strconv"
	"testing"
	"time"
)

// The stats loop calls Factor once per interval and Credit once per
// workload, zone and level: both must stay far below a microsecond.
func BenchmarkLedgerCredit(b *testing.B) {
	led := NewLedger[string]()
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "/kubepods/pod" + strconv.Itoa(i)
	}
	f := Factor{Provider: "rte", GramsPerKWh: 52}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		_, _ = led.Credit(keys[i%len(keys)], 12.5, f)
	}
}

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
