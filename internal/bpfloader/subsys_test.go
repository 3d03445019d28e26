package bpfloader

import (
	"testing"

	"github.com/wattrace/wattrace/internal/testenv"
)

// /proc/cgroups' order is the kernel's enum cgroup_subsys_id, which BTF
// states: the cheap read must give the index BTF gives.
func TestProcCgroupsIndexMatchesBTF(t *testing.T) {
	for _, c := range []string{"cpu", "cpuacct"} {
		fromBTF, err := subsysIndex(c + "_cgrp_id")
		if err != nil {
			testenv.Need(t, "no BTF or controller %s: %v", c, err)
		}
		got, ok := procCgroupsIndex("/proc/cgroups", c)
		if !ok || got != fromBTF {
			t.Errorf("%s: /proc/cgroups index %d (found %v), BTF %d", c, got, ok, fromBTF)
		}
	}
	if _, ok := procCgroupsIndex("/proc/cgroups", "no-such-controller"); ok {
		t.Error("found a controller that does not exist")
	}
	if _, ok := procCgroupsIndex("/nonexistent", "cpu"); ok {
		t.Error("found a controller without the file")
	}
}
