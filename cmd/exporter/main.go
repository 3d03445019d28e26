// Command wattrace is the exporter: it accounts CPU time per process and
// cgroup, splits the node's energy among them and serves the result to
// Prometheus. main only parses configuration and handles signals
// (internal/cli, shared with wattrace-api); the wiring is in run so it can
// be exercised without a process exit.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/wattrace/wattrace/internal/cli"
)

func main() {
	if c, ok := lookup(commands(), os.Args[1:]); ok {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := c.run(ctx, os.Args[2:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr})
		stop()
		os.Exit(code)
	}
	os.Exit(cli.Main(program, os.Args[1:], os.Stdout, os.Stderr))
}

// program is the exporter as internal/cli runs it.
var program = cli.Program[*Config]{
	Name:    "wattrace",
	Load:    Load,
	Version: func(c *Config) bool { return c.ShowVersion },
	Log:     func(c *Config) (string, string) { return c.Log.Level, c.Log.Format },
	Run:     run,
}
