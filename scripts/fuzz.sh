#!/usr/bin/env bash
# Runs every fuzz target in the module briefly (FUZZTIME each, default 3s):
# enough to catch a parser that panics on a mutated corpus entry in CI; the
# corpus a failure writes to testdata/fuzz makes it a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-3s}
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
