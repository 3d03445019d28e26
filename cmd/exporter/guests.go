package main

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/guestshare"
	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/internal/stats"
	"github.com/wattrace/wattrace/pkg/workload/libvirt"
)

// guestShares adds the writer of the guests' shares (guests.share.path) as
// a service: on a libvirt host, each VM's energy for its guest (docs/vm.md).
func guestShares(cfg *Config, loop *stats.Loop, c *components) error {
	if cfg.Guests.Dir == "" {
		return nil
	}
	gc := cfg.Guests
	gc.IdlePolicy, gc.Log = cfg.Stats.IdlePolicy, c.log.Named("guests")
	if gc.VsockPort > 0 {
		// Which domain a vsock connection is from: the running domain
		// whose status file holds the peer's context id.
		cat := libvirt.NewCatalog(cfg.Workload.LibvirtDirs)
		gc.CIDs = func(cid uint32) (string, string, bool) {
			d, ok := cat.FindCID(cid)
			return d.UUID, d.Name, ok
		}
	}
	w, err := guestshare.New(gc)
	if err != nil {
		return fmt.Errorf("guests.share: %w", err)
	}
	c.log.Info("writing guests' shares", zap.String("dir", cfg.Guests.Dir), zap.Duration("interval", cfg.Guests.Interval),
		zap.String("idle_policy", cfg.Stats.IdlePolicy), zap.Int("vsock_port", cfg.Guests.VsockPort))
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
