package workload_test

import (
	"reflect"
	"testing"

	"github.com/wattrace/wattrace/pkg/gpu/alloc"
	"github.com/wattrace/wattrace/pkg/snapshot"
	"github.com/wattrace/wattrace/pkg/workload"
)

// Each allocation holder kind is a workload level, matched on that
// level's labels: a VM by uuid when known, else by name.
func TestHolderMatch(t *testing.T) {
	for _, tc := range []struct {
		h     snapshot.GPUHolder
		level workload.Kind
		match map[string]string
	}{
		{snapshot.GPUHolder{Kind: string(alloc.SlurmJob), JobID: "77"}, workload.KindJob, map[string]string{"job_id": "77"}},
		{snapshot.GPUHolder{Kind: string(alloc.Pod), Namespace: "ns", Pod: "p", Container: "c"}, workload.KindPod, map[string]string{"namespace": "ns", "pod": "p"}},
		{snapshot.GPUHolder{Kind: string(alloc.VM), VM: "web", VMUUID: "u-1"}, workload.KindVM, map[string]string{"vm_uuid": "u-1"}},
		{snapshot.GPUHolder{Kind: string(alloc.VM), VM: "web"}, workload.KindVM, map[string]string{"vm": "web"}},
		{snapshot.GPUHolder{Kind: "other"}, "", nil},
	} {
		level, match := workload.HolderMatch(tc.h)
		if level != tc.level || !reflect.DeepEqual(match, tc.match) {
			t.Errorf("HolderMatch(%+v) = %s %v, want %s %v", tc.h, level, match, tc.level, tc.match)
		}
	}
}
