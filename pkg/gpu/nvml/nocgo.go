//go:build !cgo

package nvml

import (
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/gpu"
)

// Open reports the NVIDIA source off: go-nvml needs cgo and this binary was
// built without it (CGO_ENABLED=0).
func Open(opts Options, log *zap.Logger) (gpu.Source, error) {
	if log != nil && opts.Mode != "off" {
		log.Info("NVIDIA GPU source off: this binary was built without cgo, which NVML needs (build with CGO_ENABLED=1)")
	}
	return nil, nil
}
