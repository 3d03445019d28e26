// Command wattrace is the exporter: it accounts CPU time per process and
// cgroup, splits the node's energy among them and serves the result to
// Prometheus. main only parses configuration and handles signals; the
// wiring is in run so it can be exercised without a process exit.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/common/version"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/config"
)

func main() {
	if c, ok := lookup(commands(), os.Args[1:]); ok {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := c.run(ctx, os.Args[2:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr})
		stop()
		os.Exit(code)
	}
	cfg, err := config.Load(os.Args[1:])
	if errors.Is(err, pflag.ErrHelp) {
		return // pflag has printed usage
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "wattrace:", err)
		os.Exit(2)
	}
	if cfg.ShowVersion {
		fmt.Println(version.Print("wattrace"))
		return
	}
	log, err := newLogger(cfg.Log, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wattrace:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, cfg, log)
	stop()
	if err != nil {
		log.Error("wattrace stopped", zap.Error(err))
		_ = log.Sync()
		os.Exit(1)
	}
	_ = log.Sync()
}
