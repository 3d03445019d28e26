package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/testenv"
)

func TestConfigValidateNamesKeys(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero config: %v", err)
	}
	bad := Config{NVML: "on", Sysfs: "yes", IdleWatts: map[string]float64{"GPU-1": -3}, IdleLearnUtilization: 2,
		IdlePolicy: "even", MaxWatts: -1, SlurmGPUOrderMap: "0:x"}
	err := bad.Validate()
	for _, key := range []string{"gpu.nvml", "gpu.sysfs", "gpu.idle-watts", "gpu.idle-learn-utilization",
		"gpu.idle-policy", "gpu.max-watts", "gpu.slurm-gpu-order-map"} {
		if err == nil || !strings.Contains(err.Error(), key+":") {
			t.Errorf("%s not named in %v", key, err)
		}
	}
	if _, err := Open(bad, nil); err == nil {
		t.Error("Open accepted a bad config")
	}
}

// This machine has no GPU and no NVIDIA driver: Open succeeds with no
// devices and Interval reports nothing, as the exporter must run here
// exactly as before.
func TestOpenOnThisMachine(t *testing.T) {
	g, err := Open(Config{Slurm: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if n := len(g.Devices()); n != 0 {
		testenv.NotApplicable(t, "this test is about a machine without GPUs; this one has %d", n)
	}
	iv := g.Interval(context.Background(), time.Now())
	if len(iv.Devices) != 0 || len(iv.Health) != 1 || !iv.Health[0].Up {
		t.Errorf("%+v", iv)
	}
}
