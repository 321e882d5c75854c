#!/usr/bin/env bash
# `make test`: its stages in turn (tools, build, the Go tests, the quiet test, the
# end-to-end core through PgBouncer, the Helm chart, the container image, the
# TypeScript client, fuzzing within a budget), then the wall time of each (and of
# the wait, before the quiet test, for the builds started beside the Go tests). A stage
# that fails stops the run, as make would, and the times so far are printed.
set -uo pipefail
cd "$(dirname "$0")/.."
make="${MAKE:-make}"
stages=(
	"tools|tools"
	"build|build"
	"go tests|test-go-parallel"
	"quiet test|test-go-quiet"
	"pgbouncer|test-pgbouncer"
	"helm chart|test-helm"
	"image|test-image"
	"ts client|test-ts"
	"fuzz|fuzz-budget"
)
summary_file=$(mktemp)
trap 'rm -f "$summary_file" "${prebuild_log:-}" "${helm_prebuild_log:-}"' EXIT
export FUZZ_SUMMARY="$summary_file"

clock() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }

report=()
failed=""
all_start=$(date +%s)
prebuild_pid=""
prebuild_log=$(mktemp)
helm_prebuild_pid=""
helm_prebuild_log=$(mktemp)
for stage in "${stages[@]}"; do
	name=${stage%%|*}
	target=${stage#*|}
	if [ "$target" = test-go-quiet ]; then
		waited=$(date +%s)
		# The image's build and the chart test's compile, started beside the Go
		# tests, end before the quiet test, which no other load may disturb
		# (TestRateLimitStarts counted 12 starts in a second beside the
		# compile). A failure of either shows again in its own stage, with its
		# output.
		if [ -n "$prebuild_pid" ]; then
			wait "$prebuild_pid" || { echo "image prebuild failed:"; tail -n 40 "$prebuild_log"; }
		fi
		if [ -n "$helm_prebuild_pid" ]; then
			wait "$helm_prebuild_pid" || { echo "helm prebuild failed:"; tail -n 40 "$helm_prebuild_log"; }
		fi
		report+=("$(printf '  %-11s %7s' "prebuilds" "$(clock $(($(date +%s) - waited)))") (waiting for the rest of the image's build and the chart test's compile)")
	fi
	start=$(date +%s)
	"$make" --no-print-directory "$target"
	rc=$?
	if [ "$target" = build ] && [ "$rc" -eq 0 ]; then
		# Niced: the tests, timing-sensitive under load, come first.
		nice -n 19 scripts/image-prebuild.sh >"$prebuild_log" 2>&1 &
		prebuild_pid=$!
		# Helm v4 and Kubernetes' packages take about 10 minutes of processor
		# time to compile on an empty build cache (5.5 on 2 idle cores): compiled
		# beside the Go tests, in their idle time, the stage only runs them.
		(cd deploy/helm/test && nice -n 19 go test -count=1 -run '^$' ./...) >"$helm_prebuild_log" 2>&1 &
		helm_prebuild_pid=$!
	fi
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
