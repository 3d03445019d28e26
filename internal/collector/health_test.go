package collector

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Meter health and map drops come from the snapshot: the meter families
// per source, rejections per reason, drops per map.
func TestMeterHealthAndMapDrops(t *testing.T) {
	e := newExporter(t, testSnapshot(), Options{MeterHealth: true})
	gatherCompare(t, e, `
# HELP wattrace_source_age_seconds Age of the source's last good reading; it grows while the source fails or is late, and its figures are then those of the last good reading. 0 for a source read synchronously each interval.
# TYPE wattrace_source_age_seconds gauge
wattrace_source_age_seconds{source="nvml"} 0
wattrace_source_age_seconds{source="redfish"} 1.5
# HELP wattrace_source_read_errors_total Reads of the source that failed or timed out.
# TYPE wattrace_source_read_errors_total counter
wattrace_source_read_errors_total{source="nvml"} 2
wattrace_source_read_errors_total{source="redfish"} 1
# HELP wattrace_source_reads_total Reads of the source (for cgroupfs, of each cgroup).
# TYPE wattrace_source_reads_total counter
wattrace_source_reads_total{source="nvml"} 2
wattrace_source_reads_total{source="redfish"} 10
# HELP wattrace_source_up 1 if the source's latest read succeeded.
# TYPE wattrace_source_up gauge
wattrace_source_up{source="nvml"} 0
wattrace_source_up{source="redfish"} 1
# HELP wattrace_source_rejected_readings_total Readings a source gave that validation refused (not finite, out of range, a counter going backwards), by reason; they were never credited. Any increase means a meter or file is misbehaving.
# TYPE wattrace_source_rejected_readings_total counter
wattrace_source_rejected_readings_total{reason="backwards",source="redfish"} 1
wattrace_source_rejected_readings_total{reason="not_finite",source="redfish"} 2
# HELP wattrace_source_degraded 1 while the source is down or degraded, with why as a fixed token (nvml_driver_library_mismatch, nvml_gpu_lost, fdinfo_no_permission, kfd_unattributed, …); absent while it is fine.
# TYPE wattrace_source_degraded gauge
wattrace_source_degraded{reason="nvml_gpu_lost",source="nvml"} 1
`, "wattrace_source_age_seconds", "wattrace_source_read_errors_total", "wattrace_source_reads_total",
		"wattrace_source_up", "wattrace_source_rejected_readings_total", "wattrace_source_degraded")

	if n := testutil.CollectAndCount(e, "wattrace_bpf_map_drops_total"); n != 4 {
		t.Errorf("%d map-drop series, want 4 (one per map)", n)
	}
	// Without meter health the meter families are not even described.
	plain := newExporter(t, testSnapshot(), Options{})
	if n := testutil.CollectAndCount(plain, "wattrace_source_up"); n != 0 {
		t.Errorf("%d meter series without meter health, want 0", n)
	}
}
