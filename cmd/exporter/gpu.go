package main

import (
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/config"
	"github.com/wattrace/wattrace/pkg/gpu/node"
	"github.com/wattrace/wattrace/pkg/stats"
)

// openGPUs opens the node's GPU sources (gpu.*) and returns the stats
// loop's GPU stage, or nil on a node without GPUs: the loop then runs
// exactly as it would without GPU support, and the gpu families are
// absent. It also returns the PCI addresses of the devices the stage
// reads, in its zones' order, for the meters to leave out.
func openGPUs(cfg *config.Config, c *components) (stats.Option, []string, error) {
	g, err := node.Open(cfg.GPU, c.log.Named("gpu"))
	if err != nil {
		return nil, nil, err
	}
	if g.Empty() {
		g.Close()
		return nil, nil, nil
	}
	var pci []string
	for _, d := range g.Devices() {
		pci = append(pci, d.PCIBusID)
	}
	c.closeLater("GPU sources", g)
	c.log.Debug("GPU stage on", zap.Int("devices", len(g.Devices())))
	return stats.WithGPUs(g, stats.GPUConfig{IdleWatts: cfg.GPU.IdleWatts,
		IdleLearnUtilization: cfg.GPU.IdleLearnUtilization, IdlePolicy: cfg.GPU.IdlePolicy}), pci, nil
}
