package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/common/version"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
)

// Program is what a binary's main hands Main.
type Program[C any] struct {
	Name string
	// Load parses the arguments (without the program name) into a
	// validated configuration.
	Load func(args []string) (C, error)
	// Version is true when --version was given.
	Version func(C) bool
	// Log is the configuration's log.level and log.format.
	Log func(C) (level, format string)
	// Run runs until ctx is done (SIGINT, SIGTERM) or a part fails.
	Run func(ctx context.Context, cfg C, log *zap.Logger) error
}

// Main runs p with args and returns the exit code: 0, 2 for a
// configuration that does not load (with the error on stderr), 1 when
// Run fails (logged).
func Main[C any](p Program[C], args []string, stdout, stderr io.Writer) int {
	cfg, err := p.Load(args)
	if errors.Is(err, pflag.ErrHelp) {
		return 0 // pflag has printed usage
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", p.Name, err)
		return 2
	}
	if p.Version(cfg) {
		fmt.Fprintln(stdout, version.Print(p.Name))
		return 0
	}
	level, format := p.Log(cfg)
	log, err := NewLogger(level, format, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", p.Name, err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := p.Run(ctx, cfg, log); err != nil {
		log.Error(p.Name+" stopped", zap.Error(err))
		return 1
	}
	return 0
}
