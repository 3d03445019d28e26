#!/usr/bin/env bash
# The runs behind docs/performance.md's figures for `wattrace measure -r 20
# -- true` against `perf stat -r 20 -- true`, in one command: this build
# beside a baseline build (BASE, a commit; default main), at the node's
# task count and with CROWD (default 10,000) more sleeping processes. Each
# setting gets SETS (default 3) hyperfine sets and as many interleaved
# sets of ROUNDS (default 30) rounds, each round running every command
# once in a random order, so that a burst of other work on a shared
# machine hits all of them alike. Root, perf and hyperfine; the BPF
# programs are kept in a BPF file system of a mount namespace of the
# script's own, as systemd mounts one at /sys/fs/bpf. Output in $OUT
# (default /tmp/wattrace-measure-figures), with the load averages.
#
#   scripts/measure-figures.sh [BASE]
set -euo pipefail
if [ "${1:-}" != --inside ]; then
	base=${1:-main}
	out=${OUT:-/tmp/wattrace-measure-figures}
	"$(dirname "$0")/baseline-build.sh" "$base" "$out"
	go build -o "$out/wattrace" ./cmd/exporter
	exec unshare -m --propagation private "$0" --inside "$out"
fi
out=$2
cd "$out"
mount -t bpf bpf /sys/fs/bpf
mkdir -p /sys/fs/bpf/base
cmds=("perf stat -r 20 -- true" "./wattrace measure -r 20 -- true"
	"./wattrace-base measure --bpf.keep /sys/fs/bpf/base -r 20 -- true"
	"perf stat -r 1 -- true" "./wattrace measure -- true")
# The first measure of each build loads and keeps its programs.
./wattrace measure -- true 2>/dev/null
./wattrace-base measure --bpf.keep /sys/fs/bpf/base -- true 2>/dev/null

tasks() { find /proc/[0-9]*/task -maxdepth 1 -mindepth 1 2>/dev/null | wc -l; }
say() { echo "== $1, $(date -u +%H:%M:%S) UTC, $(tasks) tasks, load $(cut -d' ' -f1-3 /proc/loadavg)"; }

# interleave NAME: ROUNDS rounds of the three -r 20 commands; the mean
# and median of each, and the ratios to perf stat.
interleave() {
	local name=$1 r c i t0 t1
	declare -A ms
	for ((r = 0; r < ${ROUNDS:-30}; r++)); do
		while read -r i; do
			c=${cmds[$i]}
			t0=$EPOCHREALTIME
			$c >/dev/null 2>&1
			t1=$EPOCHREALTIME
			ms[$i]+="$(echo "($t1 - $t0) * 1000" | bc -l) "
		done < <(shuf -e 0 1 2)
	done
	for i in 0 1 2; do
		echo "${cmds[$i]}: ${ms[$i]}" >>"$out/$name.txt"
		printf '%s\n' ${ms[$i]} | sort -n | awk -v c="${cmds[$i]}" '{v[NR] = $1; s += $1} END {printf "  %-66s mean %7.1f ms, median %7.1f ms\n", c, s / NR, (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'
	done | tee -a "$out/$name.txt"
}

sets() {
	local tag=$1 s
	for ((s = 1; s <= ${SETS:-3}; s++)); do
		say "$tag hyperfine $s" | tee -a "$out/$tag.txt"
		hyperfine -N --warmup 3 -r 30 --export-json "$out/$tag-hyperfine-$s.json" "${cmds[@]}" | grep -E 'Benchmark|Time' | tee -a "$out/$tag.txt"
		say "$tag interleaved $s" | tee -a "$out/$tag.txt"
		interleave "$tag-interleaved-$s"
	done
	say "$tag end" | tee -a "$out/$tag.txt"
}

sets quiet
crowd=/sys/fs/cgroup/cpuacct/wattrace-figures-crowd
[ -d /sys/fs/cgroup/cpuacct ] || crowd=/sys/fs/cgroup/wattrace-figures-crowd
mkdir "$crowd"
trap 'kill $(cat "$crowd/cgroup.procs") 2>/dev/null; sleep 2; rmdir "$crowd"' EXIT
n=${CROWD:-10000}
sh -c "echo \$\$ > $crowd/cgroup.procs; i=0; while [ \$i -lt $n ]; do sleep 3600 & i=\$((i+1)); done; wait" >/dev/null 2>&1 &
until [ "$(wc -l <"$crowd/cgroup.procs")" -gt "$n" ]; do sleep 1; done
sleep 15
sets crowd
