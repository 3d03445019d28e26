package main

import (
	"context"
	"io"
)

// A command is a subcommand of the wattrace binary: `wattrace NAME ARGS…`.
// Subcommands share the binary (and so the install, the BPF objects and
// the meters) with the exporter; a first argument that names none of them
// is the exporter's own flags.
type command struct {
	name    string
	summary string
	// run gets the arguments after NAME and returns the process's exit
	// status; it writes only to the streams it is given.
	run func(ctx context.Context, args []string, stdio stdio) int
}

// stdio is the process's standard streams, passed in so that commands can
// be tested without a process.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// commands is the table of subcommands, one row each; a subcommand's code
// lives in its own file (or package) and adds its row here.
func commands() []command {
	return []command{
		measureCommand(),
		estimateCommand,
		{name: "acct", summary: "energy, CO2e, CPU and GPU time of your jobs, from the units API (like sacct)", run: runAcct},
	}
}

// lookup returns the command named by args[0], if any.
func lookup(table []command, args []string) (command, bool) {
	if len(args) == 0 {
		return command{}, false
	}
	for _, c := range table {
		if c.name == args[0] {
			return c, true
		}
	}
	return command{}, false
}
