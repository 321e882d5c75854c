#!/usr/bin/env bash
# `make test`: its stages in turn (tools, build, the Go tests, the quiet test, the
# Helm chart, the container image, the TypeScript client, fuzzing within a budget),
# then the wall time of each. A stage that fails stops the run, as make would, and
# the times so far are printed.
set -uo pipefail
cd "$(dirname "$0")/.."
make="${MAKE:-make}"
stages=(
	"tools|tools"
	"build|build"
	"go tests|test-go-parallel"
	"quiet test|test-go-quiet"
	"helm chart|test-helm"
	"image|test-image"
	"ts client|test-ts"
	"fuzz|fuzz-budget"
)
summary_file=$(mktemp)
trap 'rm -f "$summary_file"' EXIT
export FUZZ_SUMMARY="$summary_file"

clock() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }

report=()
failed=""
all_start=$(date +%s)
for stage in "${stages[@]}"; do
	name=${stage%%|*}
	target=${stage#*|}
	start=$(date +%s)
	"$make" --no-print-directory "$target"
	rc=$?
	took=$(($(date +%s) - start))
	note=""
	if [ "$target" = fuzz-budget ] && [ -s "$summary_file" ]; then
		note=" ($(cat "$summary_file") fuzzed; make fuzz runs them all)"
	fi
	if [ "$rc" -ne 0 ]; then
		note+=" FAILED"
		failed=$name
	fi
	report+=("$(printf '  %-11s %7s%s' "$name" "$(clock "$took")" "$note")")
	if [ -n "$failed" ]; then
		break
	fi
done
echo
echo "make test: wall time per stage"
printf '%s\n' "${report[@]}"
printf '  %-11s %7s\n' total "$(clock $(($(date +%s) - all_start)))"
if [ -n "$failed" ]; then
	echo "make test: the $failed stage failed"
	exit 1
fi
