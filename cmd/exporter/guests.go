package main

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/config"
	"github.com/wattrace/wattrace/pkg/guestshare"
	"github.com/wattrace/wattrace/pkg/snapshot"
	"github.com/wattrace/wattrace/pkg/stats"
)

// guestShares adds the writer of the guests' shares (guests.share.path) as
// a service: on a libvirt host, each VM's energy for its guest (docs/vm.md).
func guestShares(cfg *config.Config, loop *stats.Loop, c *components) error {
	if cfg.Guests.SharePath == "" {
		return nil
	}
	w, err := guestshare.New(guestshare.Config{Dir: cfg.Guests.SharePath, Interval: cfg.Guests.ShareInterval,
		Group: cfg.Guests.ShareGroup, IdlePolicy: cfg.Power.IdlePolicy, Log: c.log.Named("guests")})
	if err != nil {
		return fmt.Errorf("guests.share: %w", err)
	}
	c.log.Info("writing guests' shares", zap.String("dir", cfg.Guests.SharePath), zap.Duration("interval", cfg.Guests.ShareInterval),
		zap.String("idle_policy", cfg.Power.IdlePolicy))
	c.service("guest shares", func(ctx context.Context) error { return w.Run(ctx, latest{loop, ctx}) })
	return nil
}

// latest is the writer's hook into the stats loop (guestshare.Snapshots):
// the loop steps on demand, so it steps here when its latest snapshot is
// older than maxAge (stats.Loop.Fresh), without any scrape.
type latest struct {
	loop *stats.Loop
	ctx  context.Context
}

func (l latest) Fresh(maxAge time.Duration) *snapshot.Snapshot { return l.loop.Fresh(l.ctx, maxAge) }
