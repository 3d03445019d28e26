package nvml

// Options configures the NVIDIA source.
type Options struct {
	// Mode is "auto" (use NVML when the driver is there) or "off".
	Mode string
	// MaxWatts is the power ceiling per board for validation
	// (gpu.DefaultMaxWatts when 0).
	MaxWatts float64
}
