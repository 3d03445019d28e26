package nvml

import "time"

// Options configures the NVIDIA source.
type Options struct {
	// Mode is "auto" (use NVML when the driver is there) or "off".
	Mode string
	// MaxWatts is the power ceiling per board for validation
	// (gpu.DefaultMaxWatts when 0).
	MaxWatts float64
	// SampleEvery is how often a board without an energy counter has its
	// power sampled in the background for the trapezoid rule
	// (power.meter-interval); 0 samples only at each read.
	SampleEvery time.Duration
}
