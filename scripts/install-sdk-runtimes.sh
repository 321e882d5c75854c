#!/usr/bin/env bash
# Installs the runtimes of the function SDKs' tests (sdk/, the conformance suite
# in internal/e2e): python3 (sdk/python, 3.9 or later) and node (sdk/ts, 20 or
# later). On Debian as root it installs what is missing from Debian's packages;
# elsewhere it says what to install and exits 0, so that `make tools` goes on
# (the tests that need them then fail under CI=true and skip otherwise).
set -euo pipefail
missing=()
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
if [[ ${#missing[@]} -eq 0 ]]; then
	exit 0
fi
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
	echo "installing ${missing[*]} (the function SDKs' tests)" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 ||
		{ apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; }
	exit 0
fi
echo "install-sdk-runtimes: ${missing[*]} missing: install them (Debian: apt-get install ${missing[*]}) for the function SDKs' tests" >&2
