#!/bin/sh
# baseline-build builds the exporter of commit BASE as OUT/wattrace-base,
# the baseline the figures scripts (cost-figures.sh, measure-figures.sh)
# run this build beside, and names both commits in OUT/builds.txt.
#
#   scripts/baseline-build.sh BASE OUT
set -eu
base=$1
mkdir -p "$2"
out=$(cd "$2" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git archive "$base" | tar -x -C "$tmp"
(cd "$tmp" && go build -o "$out/wattrace-base" ./cmd/exporter)
echo "baseline: $(git rev-parse --short "$base"); this build: $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (modified)')" | tee "$out/builds.txt"
