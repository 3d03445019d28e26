#!/usr/bin/env bash
# bench-compare runs the benchmarks behind docs/performance.md's figures
# that need no root, no BPF and no real hardware, and compares them with the
# committed bench/baseline.txt using benchstat (built from tools/go.mod), so
# one command tells whether a change moved a figure.
#
#   scripts/bench-compare.sh             run, then benchstat baseline vs. this run
#   scripts/bench-compare.sh -baseline   run and write bench/baseline.txt instead
#
# BENCH_COUNT (default 6: benchstat wants at least 6 samples a side for a
# 95% interval) and BENCH_OUT (default bin/bench-new.txt) override. About
# two minutes on a 2-vCPU VM.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
count=${BENCH_COUNT:-6}
out=${BENCH_OUT:-bin/bench-new.txt}
baseline=bench/baseline.txt

# package | benchmark regexp | -benchtime: each a figure (or the target
# behind it) in docs/performance.md. The bpfloader, exporter-scale,
# footprint and measure benchmarks need root, BPF or many minutes and
# stay manual (their commands are in that doc).
benches=(
	"pkg/model|^BenchmarkSplit$|200x"                                  # The model
	"internal/collector|^BenchmarkProcessCollector$|200x"                   # Process collector
	"pkg/carbon|^BenchmarkChainFactor$|100000x"                        # Emissions: Chain.Factor
	"internal/stats|^BenchmarkStepEmissions$|100x"                          # Emissions: the stats stage
	"internal/gpu/node|^BenchmarkInterval8GPUs100Procs$|1000x"              # GPU sources: NVML (2 ms target)
	"internal/stats|^BenchmarkGPUStage8GPUs100Procs$|1000x"                 # GPU sources: the stats GPU stage
	"pkg/gpu/sysfs|^BenchmarkRead8Cards100Procs$|200x"                 # GPU sources: DRM
	"internal/units/guard|^BenchmarkGuardScope$|500x"                       # Query guard (2 ms budget)
	"internal/stats|^BenchmarkResourceFill200$/^fixture$|100x"              # The memory files of 200 jobs (tmpfs fixture)
	"internal/stats|^BenchmarkColdScrape10k$|30x"                           # A scrape that steps and renders, 10,000 processes
	"internal/bpfloader|^BenchmarkDecodeTasks$|50x"                         # The task records' decode and fold
)

mkdir -p bin
(cd tools && "$GO" build -o ../bin/benchstat golang.org/x/perf/cmd/benchstat)

dest=$out
if [ "${1:-}" = "-baseline" ]; then
	dest=$baseline
fi
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for b in "${benches[@]}"; do
	IFS='|' read -r pkg re bt <<<"${b%%#*}"
	pkg=${pkg// /} re=${re// /} bt=${bt// /}
	echo "== ./$pkg -bench '$re' -benchtime $bt -count $count" >&2
	"$GO" test -run '^$' -bench "$re" -benchtime "$bt" -count "$count" -benchmem "./$pkg" | tee -a "$tmp" | grep -E '^Benchmark' >&2
done

if [ "$dest" = "$baseline" ]; then
	{
		# benchstat ignores these lines (no key: value form); they say
		# where the figures come from.
		echo "# Baseline for make bench-compare, written by scripts/bench-compare.sh -baseline"
		echo "# on $(date -u +%Y-%m-%d) at commit $(git rev-parse --short HEAD)"
		echo "# machine $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), Linux $(uname -r), $("$GO" env GOVERSION)"
		cat "$tmp"
	} >"$baseline"
	echo "wrote $baseline" >&2
	exit 0
fi
cp "$tmp" "$dest"
# cpu, goos and goarch are ignored so that a run on another machine is
# still compared row by row (the deltas then say more about the machine).
bin/benchstat -ignore cpu,goos,goarch "$baseline" "$dest"
