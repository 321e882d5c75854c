#!/usr/bin/env bash
# Runs every fuzz target of the module briefly (FUZZTIME, default 1000x: a count
# rather than a duration, which Go 1.26's fuzzer can overrun). Seeds live in each
# package's testdata/ and f.Add calls; a failure leaves its input in testdata/fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-1000x}"
status=0
while IFS= read -r file; do
	pkg="./$(dirname "$file")"
	for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$file" | sed 's/^func //'); do
		echo "fuzz $pkg $target ($fuzztime)"
		if ! go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" "$pkg"; then
			status=1
		fi
	done
done < <(git ls-files '*_test.go' | xargs grep -l '^func Fuzz' | sort)
exit $status
