package sourcehealth

import (
	"github.com/wattrace/wattrace/pkg/reading"
)

// Reporter is implemented by whatever reports the health of the sources
// behind it: a meter (a combined meter reports every member), the CPU
// accounting, the cgroup reader, the GPUs, the carbon providers. The stats
// loop asks each of its sources for it by this name.
type Reporter interface {
	Health() []reading.SourceHealth
}
