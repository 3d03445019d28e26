package power

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A meter that fails its first three opens is adopted on the fourth; until
// then Read fails with ErrNoReading and Health shows it down with its
// failed attempts, each logged at warn.
func TestRetryingAdoptsWhenBack(t *testing.T) {
	var opens atomic.Int32
	e, _ := NewEstimator(LinearZone(reading.ZonePackage, 1, 1))
	core, logs := observer.New(zapcore.WarnLevel)
	r := NewRetrying("redfish", errors.New("HTTP 500"), func(ctx context.Context) (Meter, error) {
		if opens.Add(1) < 3 {
			return nil, errors.New("HTTP 500")
		}
		return e, nil
	}, RetryOptions{Log: zap.New(core), Initial: 5 * time.Millisecond, Max: 10 * time.Millisecond})
	defer r.Close()
	deadline := time.Now().Add(5 * time.Second)
	for r.Adopted() == nil {
		if time.Now().After(deadline) {
			t.Fatal("not adopted")
		}
		time.Sleep(2 * time.Millisecond)
	}
	if opens.Load() != 3 {
		t.Fatalf("%d opens, want 3", opens.Load())
	}
	if total, failed := r.Reads(); total != 4 || failed != 3 {
		t.Fatalf("Reads = %d, %d; want 4 attempts, 3 failed", total, failed)
	}
	if h := r.Health(); len(h) != 1 || h[0].Source != "estimator" || !h[0].Up {
		t.Fatalf("health after adoption %+v", h)
	}
	if _, err := r.Read(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Start, two failed retries, adoption.
	if n := logs.Len(); n != 4 {
		t.Fatalf("%d warn lines, want 4: %v", n, logs.All())
	}
}

func TestRetryingDownUntilAdopted(t *testing.T) {
	r := NewRetrying("ipmi", errors.New("busy"), func(ctx context.Context) (Meter, error) {
		return nil, errors.New("busy")
	}, RetryOptions{Initial: time.Hour})
	h := r.Health()
	if len(h) != 1 || h[0].Up || h[0].Errors != 1 || h[0].Source != "ipmi" || r.LastError() == nil {
		t.Fatalf("health %+v", h)
	}
	if _, err := r.Read(context.Background()); !errors.Is(err, ErrNoReading) {
		t.Fatalf("Read = %v", err)
	}
	done := make(chan struct{})
	go func() { r.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not stop the retry loop")
	}
}
