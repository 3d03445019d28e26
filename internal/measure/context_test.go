package measure

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
)

// waitingMeter's reads wait for their context; each read started is told
// on started, each that returned on ended.
type waitingMeter struct{ started, ended chan error }

func (waitingMeter) Name() string    { return "bmc" }
func (waitingMeter) Estimated() bool { return false }
func (m waitingMeter) Read(ctx context.Context) ([]reading.ZoneSample, error) {
	m.started <- nil
	<-ctx.Done()
	m.ended <- ctx.Err()
	return nil, ctx.Err()
}

// Measure reads the meter with its caller's context: cancelling it ends
// the read under way (on the idle baseline and before a run alike) and
// Measure returns at once with the cancellation, the command never run.
func TestCancelStopsReads(t *testing.T) {
	for _, idle := range []time.Duration{0, time.Second} {
		m := waitingMeter{started: make(chan error, 4), ended: make(chan error, 4)}
		e := &Env{Meter: m}
		o := Options{Command: []string{"true"}, Repeat: 1, Idle: idle, IdlePolicy: "none"}
		ctx, cancel := context.WithCancel(context.Background())
		type result struct {
			rep Report
			err error
		}
		done := make(chan result, 1)
		go func() {
			rep, err := Measure(ctx, o, e, "/bin/true", Report{})
			done <- result{rep, err}
		}()
		select {
		case <-m.started:
		case <-time.After(10 * time.Second):
			t.Fatalf("idle %v: the meter was never read", idle)
		}
		began := time.Now()
		cancel()
		select {
		case r := <-done:
			if took := time.Since(began); took > time.Second {
				t.Errorf("idle %v: Measure returned %v after the cancellation", idle, took)
			}
			if !errors.Is(r.err, context.Canceled) || len(r.rep.Runs) != 0 {
				t.Errorf("idle %v: %v, %d runs; want the cancellation, no run", idle, r.err, len(r.rep.Runs))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("idle %v: Measure still reading 10 s after its context was cancelled", idle)
		}
		if err := <-m.ended; !errors.Is(err, context.Canceled) {
			t.Errorf("idle %v: the read ended with %v, want the cancellation", idle, err)
		}
	}
}
