#!/bin/sh
# The runs behind docs/performance.md's cost figures, in one command: this
# build beside a baseline build (BASE, a commit; default main) and, in the
# first run, beside node_exporter; at 1,000, 10,000 and 100,000 tasks; and
# under churn. Root; about an hour on a 2-vCPU VM. Each run's table and its
# load averages go to $OUT (default /tmp/wattrace-cost-figures). Take the
# figures on a quiet machine: CPU and latency move with the node's load.
#
#   scripts/cost-figures.sh [BASE]
set -eu
base=${1:-main}
out=${OUT:-/tmp/wattrace-cost-figures}
"$(dirname "$0")/baseline-build.sh" "$base" "$out"
go build -o "$out/footprint" ./scripts/footprint

# run NAME ARGS: one footprint run, its output (and its exit status: a run
# that fails, such as churn with RSS growing, says so) in $OUT/NAME.txt.
run() {
	name=$1
	shift
	echo "== $name, $(date -u +%H:%M) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
	{
		"$out/footprint" -baseline "$out/wattrace-base" "$@" 2>&1
		echo "== $name: exit status $?"
	} | tee "$out/$name.txt"
}

# CPU at a 15 s scrape and scrape latency beside node_exporter (200 Slurm
# jobs of 5 processes), interleaved rounds.
run beside-node-exporter -cgroups 200 -procs 5 -rounds 2 -duration 120s -interval 15s -warmup 20s -burst 10 -cold 8
# Growth with the node's tasks: RSS, the scrape that steps and renders
# itself (cold) and CPU at a 15 s scrape, over sleeping processes in plain
# cgroups (no workloads), the exporter with the process collector on, as
# BenchmarkScale measures them; the last is 100,000 threads in 2,000
# cgroups (a Java or OpenMP host: one process of 50 threads per cgroup).
scale="-node-exporter=false -layout plain -busy-every 0 -duration 60s -cold 8 -wattrace.args --collector.process"
run tasks-1000 $scale -rounds 1 -cgroups 100 -procs 10
run tasks-10000 $scale -rounds 2 -cgroups 1000 -procs 10
# 500 short-lived processes a second for 5 minutes: RSS must stay flat (the
# run fails otherwise).
run churn-500 -node-exporter=false -cgroups 200 -procs 5 -rounds 1 -duration 5m -churn 500 -wattrace.args --collector.process
run tasks-100000 $scale -rounds 1 -cgroups 2000 -procs 1 -threads 50
