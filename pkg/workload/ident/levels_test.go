package ident

import "testing"

// Every level has label names and flag help: the config's
// collector.<level> flags and the workloads collector are built from them.
func TestEveryLevelIsDescribed(t *testing.T) {
	if len(Levels()) != 6 {
		t.Errorf("%d levels, want 6 (container, pod, vm, job, pbs_job, unit)", len(Levels()))
	}
	for _, l := range Levels() {
		if len(LabelNames(l)) == 0 || LevelHelp(l) == "" {
			t.Errorf("level %s: label names %v, help %q", l, LabelNames(l), LevelHelp(l))
		}
	}
}
