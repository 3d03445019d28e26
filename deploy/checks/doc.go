// Package deploy holds the tests of wattrace's deployment files: the Helm
// chart and the manifests rendered from it, the systemd unit, and the
// container-like end-to-end run of the binary with the chart's mounts and
// flags.
//
// It is a module of its own so that the Kubernetes API types the tests
// decode into (k8s.io/api, the Prometheus Operator's types) stay out of the
// exporter's go.mod; `make test` runs it beside the main module.
package deploy
