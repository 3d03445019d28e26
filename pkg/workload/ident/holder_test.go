package ident_test

import (
	"reflect"
	"testing"

	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// Each allocation holder kind is a workload level, matched on that
// level's labels: a VM by uuid when known, else by name.
func TestHolderMatch(t *testing.T) {
	for _, tc := range []struct {
		h     reading.Holder
		level ident.Kind
		match map[string]string
	}{
		{reading.Holder{Kind: reading.HolderSlurmJob, JobID: "77"}, ident.KindJob, map[string]string{"job_id": "77"}},
		{reading.Holder{Kind: reading.HolderPod, Namespace: "ns", Pod: "p", Container: "c"}, ident.KindPod, map[string]string{"namespace": "ns", "pod": "p"}},
		{reading.Holder{Kind: reading.HolderVM, VMName: "web", VMUUID: "u-1"}, ident.KindVM, map[string]string{"vm_uuid": "u-1"}},
		{reading.Holder{Kind: reading.HolderVM, VMName: "web"}, ident.KindVM, map[string]string{"vm": "web"}},
		{reading.Holder{Kind: "other"}, "", nil},
	} {
		level, match := ident.HolderMatch(tc.h)
		if level != tc.level || !reflect.DeepEqual(match, tc.match) {
			t.Errorf("HolderMatch(%+v) = %s %v, want %s %v", tc.h, level, match, tc.level, tc.match)
		}
	}
}
