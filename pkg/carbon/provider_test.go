package carbon

import (
	"context"
	"math"
	"testing"
)

// A NaN cannot travel in JSON, so the network tests cannot send one: a
// fetcher that returns it must be rejected the same way.
func TestProviderRejectsNaN(t *testing.T) {
	p := NewProvider(Constant{GramsPerKWh: math.NaN()}, ProviderOptions{})
	if err := p.Poll(context.Background()); err == nil {
		t.Fatal("NaN accepted")
	}
	if h := p.Health(); h.Rejected["non_finite"] != 1 || h.Up {
		t.Fatalf("health %+v", h)
	}
	if _, ok := p.Current(); ok {
		t.Fatal("NaN cached")
	}
}
