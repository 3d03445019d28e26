package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

type closeRecorder struct {
	name  string
	order *[]string
}

func (c closeRecorder) Close() error { *c.order = append(*c.order, c.name); return nil }

// A service that fails stops the others, run returns its error named, and
// the parts close in reverse order of opening.
func TestComponentsStopTogether(t *testing.T) {
	var closed []string
	c := newComponents(zap.NewNop())
	c.closeLater("first", closeRecorder{"first", &closed})
	c.closeLater("second", closeRecorder{"second", &closed})
	stopped := make(chan struct{})
	c.service("waiter", func(ctx context.Context) error {
		<-ctx.Done()
		close(stopped)
		return nil
	})
	c.service("failer", func(ctx context.Context) error {
		time.Sleep(10 * time.Millisecond)
		return errors.New("boom")
	})
	err := c.run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "failer: boom") {
		t.Fatalf("run = %v, want the failing service's error", err)
	}
	select {
	case <-stopped:
	default:
		t.Error("the other service was not stopped")
	}
	c.close()
	if strings.Join(closed, ",") != "second,first" {
		t.Errorf("closed %v, want second then first", closed)
	}
}

// Cancelling run's context stops every service cleanly; a service that
// returns nil before that is an error.
func TestComponentsShutdownAndGivingUp(t *testing.T) {
	c := newComponents(zap.NewNop())
	c.service("loop", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	if err := c.run(ctx); err != nil {
		t.Errorf("run after cancel = %v, want nil", err)
	}
	c.close()

	c = newComponents(zap.NewNop())
	c.service("quitter", func(context.Context) error { return nil })
	if err := c.run(context.Background()); err == nil || !strings.Contains(err.Error(), "quitter: returned unexpectedly") {
		t.Errorf("run = %v, want quitter's unexpected return", err)
	}
	c.close()
}
