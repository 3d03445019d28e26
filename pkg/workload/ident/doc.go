// Package ident is the workload vocabulary: what a workload is (Kind,
// Identity, the managers) and how it is named and counted (the kinds
// table in kinds.go: each level's labels, flag help, manager, GPU holder
// match, Alloy service name, and the grammar of its cgroups' paths, whose
// vocabulary is grammar.go).
//
// It reads nothing: package workload finds the identities (Parse, the
// Resolver and its enrichment sources), and the stats loop, the
// collectors, the configuration and the Alloy targets name workloads with
// this package alone, so that the stats loop needs no source package
// (internal/layers checks it). See package workload's documentation for
// the layouts and the label scheme.
package ident
