#!/usr/bin/env bash
# cyclo fails when a function outside generated code has a cyclomatic
# complexity over 30 (gocyclo, built from tools/go.mod) and is not among
# the exceptions that docs/architecture.md's "Complexity" table names with
# the reason, and when a function that table names is no longer over 30
# (or is gone), so that the list cannot go stale. `make lint` runs it.
#
#   scripts/cyclo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
over=30
doc=docs/architecture.md

mkdir -p bin
(cd tools && "$GO" build -o ../bin/gocyclo github.com/fzipp/gocyclo/cmd/gocyclo)

# Generated files say so in Go's standard header (bpf2go's *_bpfel.go).
generated=$(grep -rlE --include='*.go' '^// Code generated .* DO NOT EDIT\.$' . | sed 's|^\./||' | sort)

# gocyclo writes "<complexity> <package> <function> <file>:<line>:<column>"
# and exits 1 when it writes anything.
report=$(bin/gocyclo -over "$over" -ignore '(^|/)testdata/' . || true)
found=$(awk -v gen="$generated" '
	BEGIN { n = split(gen, g, "\n"); for (i = 1; i <= n; i++) skip[g[i]] = 1 }
	NF == 4 { f = $4; sub(/:[0-9]+:[0-9]+$/, "", f); if (!(f in skip)) print f " " $3 " " $1 }
' <<<"$report" | sort)

# The table's rows: | `function` | `file` | why |
named=$(awk '
	/^\| function \| file \| why \|/ { table = 1; next }
	table && /^\|[ -]+\|/ { next }
	table && /^\|/ { split($0, c, "|"); fn = c[2]; f = c[3]; gsub(/[` ]/, "", fn); gsub(/[` ]/, "", f); print f " " fn; next }
	table { exit }
' "$doc" | sort)
# The table stays, empty, when no function is an exception.
if ! grep -q '^| function | file | why |' "$doc"; then
	echo "cyclo: no Complexity table (| function | file | why |) in $doc" >&2
	exit 1
fi

status=0
while read -r file fn n; do
	[ -n "$file" ] || continue
	if ! grep -qxF "$file $fn" <<<"$named"; then
		echo "$file: $fn has cyclomatic complexity $n (over $over): make it simpler, or name it with the reason in $doc's Complexity table" >&2
		status=1
	fi
done <<<"$found"
while read -r file fn; do
	[ -n "$file" ] || continue
	if ! awk '{ print $1 " " $2 }' <<<"$found" | grep -qxF "$file $fn"; then
		echo "$doc names $fn ($file) as a complexity exception, but it is not over $over or is gone: remove its row" >&2
		status=1
	fi
done <<<"$named"
if [ "$status" = 0 ]; then
	echo "cyclo: no function over $over but the $(grep -c . <<<"$named" || true) named in $doc"
fi
exit "$status"
