#!/usr/bin/env bash
# Runs every fuzz target in the module briefly (FUZZTIME each, default
# 5000x: an execution count, not a duration, because a duration races Go's
# fuzz coordinator on a loaded machine and fails with a bare "context
# deadline exceeded" and no crasher, golang/go#75804, unfixed in Go 1.26):
# enough to catch a parser that panics on a mutated corpus entry in CI; the
# corpus a failure writes to testdata/fuzz makes it a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-5000x}
grep -rl --include='*_test.go' '^func Fuzz' . | sort | while read -r f; do
	pkg=./$(dirname "${f#./}")
	for name in $(grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | cut -d' ' -f2); do
		echo "fuzz ${pkg} ${name} (${fuzztime})"
		if ! out=$(go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg" 2>&1); then
			echo "$out"
			exit 1
		fi
	done
done
