package main

import (
	"context"
	"fmt"
	"strings"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/stats"
	"github.com/wattrace/wattrace/pkg/carbon"
)

// emissionsPart builds the carbon-intensity chain and runs its providers
// in the background as a service of the run group, so it stops with the
// exporter. Only bad configuration fails start-up (an unreadable token
// file, naming its key); a provider that is down never does: the loop
// prices nothing until one answers, or uses the fallback.
func emissionsPart(cfg *Config, c *components) ([]stats.Option, error) {
	if !cfg.Emissions.Enabled {
		return nil, nil
	}
	chain, err := carbon.New(cfg.Emissions.Carbon, carbon.Options{Log: c.log.Named("carbon")})
	if err != nil {
		return nil, fmt.Errorf("emissions: %w", err)
	}
	c.log.Info("emissions priced by carbon intensity", zap.String("providers", strings.Join(cfg.Emissions.Carbon.Chain(), ",")))
	c.service("carbon intensity", func(ctx context.Context) error {
		chain.Run(ctx)
		return nil
	})
	return []stats.Option{stats.WithEmissions(chain)}, nil
}
