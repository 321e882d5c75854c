#!/usr/bin/env bash
# Runs the module's fuzz targets briefly: each package's test binary is built once
# with the fuzzer's coverage instrumentation (go test -c -fuzz), then runs each of
# its targets in turn for FUZZTIME (default 1000x: a count rather than a duration,
# which Go 1.26's fuzzer can overrun). Seeds live in each package's testdata/ and
# f.Add calls, and run in every `go test`; a failure leaves its input in
# testdata/fuzz.
#
#   FUZZTIME=1000x      what each target runs for (-fuzztime)
#   FUZZ_BUDGET=0       seconds for the whole run, 0 for no limit. Within a budget
#                       no package is started once it is spent, and a build still
#                       going when it runs out is stopped (its compiled packages
#                       stay in the build cache for the next run): the targets left
#                       out are listed, not failed. `make test` passes a budget,
#                       `make fuzz` none.
#   FUZZ_ROTATE=1       start from another package each day (day of the year), so
#                       that runs within a budget reach every package over time;
#                       0 starts from the first.
#   FUZZ_PACKAGES=      only these packages (./api ./bundle …).
#   FUZZPARALLEL=       fuzzing workers per target (-parallel; default GOMAXPROCS).
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-1000x}"
budget="${FUZZ_BUDGET:-0}"
start=$(date +%s)

# Each package with fuzz targets, once, in order.
mapfile -t packages < <(
	if [ -n "${FUZZ_PACKAGES:-}" ]; then
		printf '%s\n' ${FUZZ_PACKAGES}
	else
		git ls-files '*_test.go' | xargs grep -l '^func Fuzz' | xargs -n1 dirname | sort -u | sed 's|^|./|'
	fi
)
if [ "${#packages[@]}" -eq 0 ]; then
	echo "fuzz: no fuzz targets"
	exit 0
fi
if [ "${FUZZ_ROTATE:-1}" = 1 ] && [ "${#packages[@]}" -gt 1 ]; then
	day=$((10#$(date -u +%j)))
	shift_by=$((day % ${#packages[@]}))
	packages=("${packages[@]:shift_by}" "${packages[@]:0:shift_by}")
fi

targets_of() { # the fuzz targets of package $1
	grep -ho '^func Fuzz[A-Za-z0-9_]*' "$1"/*_test.go | sed 's/^func //'
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cache="$(go env GOCACHE)/fuzz"
status=0
fuzzed=0
total=0
left_out=()

for pkg in "${packages[@]}"; do
	mapfile -t targets < <(targets_of "$pkg")
	total=$((total + ${#targets[@]}))
	remaining=0
	if [ "$budget" -gt 0 ]; then
		remaining=$((budget - ($(date +%s) - start)))
		if [ "$remaining" -le 0 ]; then
			left_out+=("${targets[@]/#/$pkg:}")
			continue
		fi
	fi
	bin="$work/$(echo "$pkg" | tr '/.' '__').test"
	echo "fuzz: build $pkg (${targets[*]})"
	build=(go test -c -fuzz=. -o "$bin" "$pkg")
	if [ "$remaining" -gt 0 ]; then
		build=(timeout "$remaining" "${build[@]}")
	fi
	if "${build[@]}"; then
		:
	else
		rc=$?
		if [ "$budget" -gt 0 ] && [ "$rc" -eq 124 ]; then
			echo "fuzz: the build of $pkg did not end within the budget (${budget}s)"
			left_out+=("${targets[@]/#/$pkg:}")
			continue
		fi
		echo "fuzz: build $pkg failed"
		status=1
		continue
	fi
	importpath=$(go list "$pkg")
	for target in "${targets[@]}"; do
		echo "fuzz: $pkg $target ($fuzztime)"
		args=(-test.run='^$' -test.fuzz="^${target}\$" -test.fuzztime="$fuzztime"
			-test.fuzzcachedir="$cache/$importpath")
		if [ -n "${FUZZPARALLEL:-}" ]; then
			args+=(-test.parallel="$FUZZPARALLEL")
		fi
		# A test binary runs in its package's folder (testdata/fuzz is relative).
		if (cd "$pkg" && "$bin" "${args[@]}"); then
			fuzzed=$((fuzzed + 1))
		else
			status=1
		fi
	done
done

elapsed=$(($(date +%s) - start))
summary="fuzzed $fuzzed of $total targets in ${elapsed}s"
if [ "${#left_out[@]}" -gt 0 ]; then
	summary+="; left out by the budget of ${budget}s (make fuzz runs them): ${left_out[*]}"
fi
echo "fuzz: $summary"
if [ -n "${FUZZ_SUMMARY:-}" ]; then
	echo "$fuzzed of $total targets" >"$FUZZ_SUMMARY"
fi
exit $status
