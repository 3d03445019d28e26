# wattrace build, test and lint targets. CI runs `make lint check-generate test`
# through .ci/run.

GO          ?= go
STATICCHECK ?= $(shell command -v staticcheck 2>/dev/null || echo $(shell $(GO) env GOPATH)/bin/staticcheck)
BIN         ?= bin/wattrace
# helm for `make manifests`; deploy's tests go install it there when missing.
HELM        ?= $(shell command -v helm 2>/dev/null || echo $(shell $(GO) env GOPATH)/bin/helm)

# Version information, stamped into prometheus/common/version so that
# --version and wattrace_build_info identify the build.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
BRANCH   ?= $(shell git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)
VERSION_PKG := github.com/prometheus/common/version
LDFLAGS := -s -w \
	-X $(VERSION_PKG).Version=$(VERSION) \
	-X $(VERSION_PKG).Revision=$(REVISION) \
	-X $(VERSION_PKG).Branch=$(BRANCH) \
	-X $(VERSION_PKG).BuildUser=$(shell id -un 2>/dev/null)@$(shell hostname 2>/dev/null) \
	-X $(VERSION_PKG).BuildDate=$(shell date -u +%Y%m%d-%H:%M:%S)

.PHONY: all build run test manifests e2e bench bench-compare bench-baseline footprint fuzz generate vmlinux lint check-generate clean

all: lint test build

# CGO_ENABLED=1: NVIDIA GPUs are read through NVML (go-nvml), which needs
# cgo to dlopen libnvidia-ml.so.1 at run time; without the driver the
# binary runs as before (the GPU source is off). gcc is all it needs; the
# binary links glibc dynamically (the image uses distroless/base, which has
# it). CGO_ENABLED=0 still builds, without NVIDIA support. The BPF objects
# are committed, so no clang is needed here. wattrace-api (the units
# server) is pure Go: SQLite through modernc.org/sqlite, no cgo.
build:
	CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/exporter
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(dir $(BIN))wattrace-api ./cmd/wattrace-api

# Starts the exporter with defaults. BPF accounting needs root (or
# CAP_BPF+CAP_PERFMON); without it wattrace falls back to
# procfs accounting.
run: build
	./$(BIN)

# Tests that need root or BPF skip themselves otherwise; CI runs as root.
# -p 1: several tests compare CPU time under a load they generate, and
# packages running side by side on a small machine would starve each other.
# deploy/checks is a module of its own (the Kubernetes API types its tests decode
# into stay out of the exporter's go.mod): the Helm chart (helm lint and
# template; helm is installed with go install when missing), the rendered
# manifests, the systemd unit and the container-like run of the binary.
test:
	$(GO) test -p 1 -count=1 ./...
	cd deploy/checks && $(GO) test -p 1 -count=1 -timeout 30m ./...

# Re-renders deploy/kubernetes/*.yaml from the Helm chart (needs helm; the
# deploy tests fail while the committed files differ).
manifests:
	HELM=$(HELM) ./deploy/kubernetes/render.sh

# End-to-end tests against a real single-node Slurm, real libvirt QEMU
# VMs and a real Prometheus (e2e/, build tag e2e): they need root and apt-get
# (they install Debian's slurm, munge, libvirt, qemu and prometheus packages
# when missing), start the daemons and VMs they need and remove them again.
e2e:
	$(GO) vet -tags e2e ./e2e/...
	$(GO) test -tags e2e -count=1 -p 1 -timeout 40m -v ./e2e/...

# Every fuzz target, briefly (FUZZTIME=5000x executions each by default).
fuzz:
	./scripts/fuzz.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The benchmarks behind docs/performance.md's figures that need no root or
# hardware, against bench/baseline.txt with benchstat (from tools/go.mod):
# a few minutes. bench-baseline rewrites the baseline from a run here.
bench-compare:
	GO=$(GO) ./scripts/bench-compare.sh

bench-baseline:
	GO=$(GO) ./scripts/bench-compare.sh -baseline

# wattrace beside Debian's node_exporter on 200 Slurm-like cgroups of 5
# processes, interleaved rounds, medians (root; docs/performance.md).
# FOOTPRINT_ARGS="-rounds 1 -duration 20s -warmup 12s -cgroups 20" for a
# quick look.
FOOTPRINT_ARGS ?= -rounds 3 -duration 2m
footprint:
	$(GO) run ./scripts/footprint $(FOOTPRINT_ARGS)

# Regenerates the BPF objects and Go bindings with bpf2go (needs clang and
# bpftool).
generate:
	$(GO) generate ./internal/bpfloader/...

# vmlinux.h comes from the kernel the programs were developed on; CO-RE
# relocates against the running kernel's BTF, so it rarely needs refreshing
# and is kept out of check-generate (CI's kernel may differ).
vmlinux:
	bpftool btf dump file /sys/kernel/btf/vmlinux format c > vmlinux/vmlinux.h

lint:
	@out="$$(gofmt -l .)"; \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd deploy/checks && $(GO) vet ./...
	$(STATICCHECK) ./...
	$(GO) run ./scripts/dashlint -strict deploy/grafana/dashboards deploy/grafana/units
	GO=$(GO) ./scripts/cyclo.sh

# Fails when the committed BPF output is stale: regenerate, then require no
# change and no new file.
check-generate: generate
	git diff --exit-code -- internal/bpfloader vmlinux
	@untracked="$$(git ls-files --others --exclude-standard -- internal/bpfloader vmlinux)"; \
	if [ -n "$$untracked" ]; then echo "generated files not committed:"; echo "$$untracked"; exit 1; fi

clean:
	rm -rf bin
