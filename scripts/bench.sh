#!/usr/bin/env bash
# make bench: builds bin/cairn, then runs the benchmark (bench/, a Go module of its
# own so that River and pgx stay out of Cairn's go.mod). It starts a private
# PostgreSQL (fsync and synchronous_commit on) and a versitygw, runs the scenarios,
# prints a table and writes bench/results/<scenario>.json.
#
#   BENCH_QUICK=1 scripts/bench.sh        smoke run (~2 min) into bench/results-quick
#   scripts/bench.sh -scenarios latency   any flag of bench/cmd/bench (-h lists them)
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
export PATH="$("$GO" env GOPATH)/bin:$PATH"
if ! command -v versitygw >/dev/null 2>&1; then
	echo "bench: versitygw not found: run \`make tools\`" >&2
	exit 1
fi
"$GO" build -o bin/cairn ./cmd/cairn
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"$GO" build -C bench -o "$tmp/bench" ./cmd/bench
"$tmp/bench" -cairn bin/cairn "$@"
