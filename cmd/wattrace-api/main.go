// Command wattrace-api keeps the units store: it discovers every unit
// (Slurm job, pod, VM, container, systemd unit) from the exporters'
// series in a Prometheus-compatible TSDB, counts their energy, CO2e, CPU,
// IO and network from the counters there, adds Slurm's metadata, and
// serves the units and their usage over HTTP for Grafana and `wattrace
// acct`. It reads the TSDB, never a node's exporter or its loop.
//
// main parses configuration and handles signals; run wires the parts.
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
)

func main() {
	cfg, err := Load(os.Args[1:])
	if errors.Is(err, pflag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "wattrace-api:", err)
		os.Exit(2)
	}
	if cfg.ShowVersion {
		fmt.Println(version.Print("wattrace-api"))
		return
	}
	log, err := newLogger(cfg.Log, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "wattrace-api:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, cfg, log)
	stop()
	if err != nil {
		log.Error("wattrace-api stopped", zap.Error(err))
		_ = log.Sync()
		os.Exit(1)
	}
	_ = log.Sync()
}
