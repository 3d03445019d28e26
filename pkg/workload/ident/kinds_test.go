package ident

import (
	"slices"
	"testing"

	"github.com/wattrace/wattrace/pkg/reading"
)

func holderOf(kind string) reading.Holder {
	return reading.Holder{Kind: reading.HolderKind(kind), JobID: "1", Namespace: "ns", Pod: "p", VMName: "v", VMUUID: "u"}
}

// Every row of the kinds table is complete: the collector, config, stats
// and Alloy read each field without checking it.
func TestKindRowsComplete(t *testing.T) {
	ranks := map[int]Kind{}
	for _, r := range kinds {
		if r.help == "" || len(r.labels) == 0 || r.member == nil || r.values == nil || r.service == nil {
			t.Errorf("%s: incomplete row %+v", r.kind, r)
		}
		if k, dup := ranks[r.serviceRank]; dup {
			t.Errorf("%s and %s share service rank %d", r.kind, k, r.serviceRank)
		}
		ranks[r.serviceRank] = r.kind
		if (r.holder == "") != (r.match == nil) {
			t.Errorf("%s: holder %q without a match, or the reverse", r.kind, r.holder)
		}
		if r.match != nil {
			for k := range r.match(holderOf(r.holder)) {
				if !slices.Contains(r.labels, k) {
					t.Errorf("%s: holder match on %q, not one of its labels %v", r.kind, k, r.labels)
				}
			}
		}
	}
}

// A table with one more row answers for it everywhere: the seam the
// built-in table and TestAddKind's toy kind use.
func TestKindTableExtraRow(t *testing.T) {
	toy := kindRow{kind: "toy", help: "toys", labels: []string{"toy_id"},
		member:  func(id Identity) bool { return id.Kind == "toy" },
		values:  func(id Identity) []string { return []string{id.ID} },
		service: func(id Identity) string { return "toy/" + id.ID }, serviceRank: -1}
	tab := append(slices.Clip(kinds), toy)
	if got := tab.levels(); len(got) != len(kinds)+1 || got[len(got)-1] != "toy" {
		t.Fatalf("levels %v", got)
	}
	// A toy in a pod: the rank puts the toy's service name first.
	id := Identity{Kind: "toy", ID: "9", PodUID: "u", Pod: "p", Namespace: "ns"}
	if v, ok := tab.labelValues(id, "toy"); !ok || len(v) != 1 || v[0] != "9" {
		t.Errorf("toy values %q %v", v, ok)
	}
	if s := tab.serviceName(id); s != "toy/9" {
		t.Errorf("service %q", s)
	}
	if s := kinds.serviceName(id); s != "ns/p" {
		t.Errorf("built-in table: service %q, want the pod's", s)
	}
	if _, ok := kinds.labelValues(id, "toy"); ok {
		t.Error("the built-in table knows the toy")
	}
}
