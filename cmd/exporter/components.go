package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	rungroup "github.com/oklog/run"
	"go.uber.org/zap"
)

// components is what run builds, in one place: the parts to close once
// the exporter stops (BPF programs, meter sessions, perf descriptors), in
// reverse order of opening, and the services that run until one of them
// ends (the stats loop, the HTTP server, the kubelet client). Services run
// in an oklog/run group: the first to return stops the others, so a failed
// part is never left half running.
type components struct {
	log     *zap.Logger
	closers []namedCloser
	group   rungroup.Group
	// cancel stops the services that run until their context ends.
	ctx    context.Context
	cancel context.CancelFunc
}

type namedCloser struct {
	name string
	c    io.Closer
}

func newComponents(log *zap.Logger) *components {
	ctx, cancel := context.WithCancel(context.Background())
	return &components{log: log, ctx: ctx, cancel: cancel}
}

// closeLater registers a part to close when the exporter stops.
func (c *components) closeLater(name string, cl io.Closer) {
	c.closers = append(c.closers, namedCloser{name, cl})
}

// service adds a part that runs until its context is cancelled; a nil
// return before that is an error (the part gave up).
func (c *components) service(name string, fn func(ctx context.Context) error) {
	c.group.Add(func() error {
		err := fn(c.ctx)
		if err == nil && c.ctx.Err() == nil {
			err = errors.New("returned unexpectedly")
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	}, func(error) { c.cancel() })
}

// actor adds a part with its own way of being stopped (the HTTP server
// shuts down gracefully).
func (c *components) actor(execute func() error, interrupt func(error)) {
	c.group.Add(execute, interrupt)
}

// run runs every service until ctx ends or one of them returns, then
// stops them all and returns the first error.
func (c *components) run(ctx context.Context) error {
	c.group.Add(func() error {
		select {
		case <-ctx.Done():
			c.log.Info("shutting down")
		case <-c.ctx.Done():
		}
		return nil
	}, func(error) { c.cancel() })
	return c.group.Run()
}

// close closes the parts in reverse order of opening.
func (c *components) close() {
	c.cancel()
	for i := len(c.closers) - 1; i >= 0; i-- {
		if err := c.closers[i].c.Close(); err != nil {
			c.log.Warn("closing "+c.closers[i].name, zap.Error(err))
		}
	}
}
