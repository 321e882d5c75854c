#!/usr/bin/env bash
# Tests the TypeScript client (clients/ts) against a live `cairn dev`: builds
# bin/cairn if needed, starts the server in a temporary folder on a free port,
# waits for its credentials file, runs `npm ci` (only when node_modules is
# missing) and `npm test` in clients/ts with CAIRN_SERVER and CAIRN_TOKEN set,
# and stops the server. Exits non-zero when anything fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
BIN="$root/bin/cairn"

if [[ ! -x $BIN ]]; then
	echo "== building $BIN"
	go build -o "$BIN" ./cmd/cairn
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
	# A fresh Debian machine may lack Node.js: as root, install it from Debian's packages.
	if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
		echo "ts-client-test: installing nodejs and npm" >&2
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
	fi
fi
command -v node >/dev/null || { echo "ts-client-test: node is not installed (apt-get install nodejs npm)" >&2; exit 1; }
command -v npm >/dev/null || { echo "ts-client-test: npm is not installed (apt-get install npm)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/cairn-ts.XXXXXX")
# As root, cairn dev runs PostgreSQL as the postgres account, which must enter here.
chmod 755 "$work"
dev_pid=
cleanup() {
	if [[ -n $dev_pid ]] && kill -0 "$dev_pid" 2>/dev/null; then
		kill -TERM "$dev_pid"
		wait "$dev_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

echo "== starting cairn dev in $work"
(cd "$work" && exec "$BIN" dev --data-dir "$work/data" --listen 127.0.0.1:0) >"$work/dev.out" 2>"$work/dev.log" &
dev_pid=$!

# The credentials file appears once the server listens (written whole by one
# write); then wait for readiness. 60 s: a first start initialises PostgreSQL.
creds="$work/data/credentials"
ready=
for _ in $(seq 1 600); do
	if ! kill -0 "$dev_pid" 2>/dev/null; then
		echo "ts-client-test: cairn dev exited early:" >&2
		cat "$work/dev.log" >&2
		exit 1
	fi
	if [[ -s $creds ]] && grep -q '^CAIRN_TOKEN=' "$creds"; then
		# shellcheck disable=SC1090
		source "$creds"
		if node -e 'fetch(process.argv[1]).then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))' "$CAIRN_SERVER/readyz"; then
			ready=1
			break
		fi
	fi
	sleep 0.1
done
if [[ -z $ready ]]; then
	echo "ts-client-test: cairn dev not ready after 60 s:" >&2
	cat "$work/dev.log" >&2
	exit 1
fi
export CAIRN_SERVER CAIRN_TOKEN
echo "== cairn dev ready at $CAIRN_SERVER"

cd "$root/clients/ts"
if [[ ! -d node_modules ]]; then
	echo "== npm ci"
	npm ci --no-audit --no-fund
fi
echo "== npm test"
status=0
npm test || status=$?
if [[ $status -ne 0 ]]; then
	echo "ts-client-test: npm test failed; server log:" >&2
	tail -n 50 "$work/dev.log" >&2
fi
exit "$status"
