package main

import (
	"context"

	"github.com/wattrace/wattrace/internal/measure"
)

// measureCommand is `wattrace measure [flags] -- CMD [ARGS…]`: the energy
// of one command (internal/measure, docs/measure.md). The same row also serves
// measure's cgroup helper, this binary started again as
// `wattrace measure -- CMD` with the helper's environment set.
func measureCommand() command {
	return command{
		name:    "measure",
		summary: "Run a command in its own cgroup and report its energy, like perf stat (docs/measure.md).",
		run: func(ctx context.Context, args []string, s stdio) int {
			return measure.Main(ctx, args, s.in, s.out, s.err, []string{"measure"})
		},
	}
}
