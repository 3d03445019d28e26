# syntax=docker/dockerfile:1
#
# wattrace container image. The BPF objects are committed (internal/bpfloader),
# so the build needs neither clang nor kernel headers.
#
# Run it privileged, in the host's PID and cgroup namespaces, with the
# host's /proc and cgroupfs mounted (see README "Deployment"):
#
#   docker run --rm --privileged --pid=host --cgroupns=host \
#     -v /proc:/host/proc:ro -v /sys:/sys:ro -v /sys/fs/cgroup:/host/sys/fs/cgroup:ro \
#     -p 9841:9841 wattrace
#
# Instead of --privileged: --cap-add BPF --cap-add PERFMON
# --cap-add DAC_READ_SEARCH (RAPL's energy_uj is
# root-only since Linux 5.10) --security-opt apparmor=unconfined.

# bookworm: the binary links glibc (cgo, for NVML), so it is built against
# the glibc of the runtime image below (Debian 12), never a newer one.
FROM golang:1.26-bookworm AS build
WORKDIR /src
# Dependencies first, so code changes don't invalidate the module cache.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG REVISION=unknown
ARG BRANCH=unknown
RUN CGO_ENABLED=1 CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" go build -trimpath \
      -ldflags "-s -w \
        -X github.com/prometheus/common/version.Version=${VERSION} \
        -X github.com/prometheus/common/version.Revision=${REVISION} \
        -X github.com/prometheus/common/version.Branch=${BRANCH}" \
      -o /out/wattrace ./cmd/exporter

# base, not static: the binary is built with cgo (CGO_ENABLED=1, as `make
# build`) so that it can dlopen NVIDIA's libnvidia-ml.so.1 through go-nvml;
# it links glibc, which distroless/static lacks (the binary would not
# start there). On GPU nodes the NVIDIA container toolkit mounts
# libnvidia-ml.so.1 into the container; elsewhere the GPU source is off.
# Not the :nonroot variant: loading BPF programs and reading RAPL need root
# or the capabilities listed above. In Kubernetes, use the Helm chart
# (deploy/helm/wattrace): it runs as root with all capabilities dropped but
# these, and passes its own --path.* flags for its mounts.
FROM gcr.io/distroless/base-debian12
COPY --from=build /out/wattrace /bin/wattrace
USER 0:0
EXPOSE 9841
ENTRYPOINT ["/bin/wattrace"]
# The host's /proc and cgroupfs are expected under /host; /sys is the
# container's own, which for sysfs shows the host's devices (RAPL, BTF).
CMD ["--path.procfs=/host/proc", "--path.cgroupfs=/host/sys/fs/cgroup"]
