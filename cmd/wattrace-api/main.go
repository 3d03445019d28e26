// Command wattrace-api keeps the units store: it discovers every unit
// (Slurm or PBS job, pod, VM, container, systemd unit) from the
// exporters' series in a Prometheus-compatible TSDB, counts their energy,
// CO2e, CPU, IO and network from the counters there, adds Slurm's and
// PBS's metadata, and
// serves the units and their usage over HTTP for Grafana and `wattrace
// acct`. It reads the TSDB, never a node's exporter or its loop.
//
// main parses configuration and handles signals (internal/cli, shared
// with the exporter); run wires the parts.
package main

import (
	"os"

	"github.com/wattrace/wattrace/internal/cli"
)

// program is the server as internal/cli runs it; tests run it with
// another Run.
var program = cli.Program[*Config]{
	Name:    "wattrace-api",
	Load:    Load,
	Version: func(c *Config) bool { return c.ShowVersion },
	Log:     func(c *Config) (string, string) { return c.Log.Level, c.Log.Format },
	Run:     run,
}

func main() {
	os.Exit(cli.Main(program, os.Args[1:], os.Stdout, os.Stderr))
}
