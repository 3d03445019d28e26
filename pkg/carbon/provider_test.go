package carbon

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
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

// hung is a provider's API that never answers before the fetch's
// deadline.
type hung struct{}

func (hung) Name() string { return "hung" }
func (hung) Zone() string { return "FR" }
func (hung) Fetch(ctx context.Context) (Sample, error) {
	<-ctx.Done()
	return Sample{}, ctx.Err()
}

// A fetch cut off by the provider's timeout is a failed read and a late
// reading, and the provider's health says why while it is the latest.
func TestProviderTimeoutIsLate(t *testing.T) {
	p := NewProvider(hung{}, ProviderOptions{Timeout: 10 * time.Millisecond})
	if err := p.Poll(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Poll = %v, want the deadline", err)
	}
	if h := p.Health(); h.Up || h.Errors != 1 || h.Rejected["late"] != 1 || h.Reason != reading.ReasonDeadline {
		t.Fatalf("health %+v, want down, 1 error, 1 late, %s", h, reading.ReasonDeadline)
	}
	if _, ok := p.Current(); ok {
		t.Fatal("a value cached from a fetch that never answered")
	}
}
