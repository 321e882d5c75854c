#!/usr/bin/env bash
# Installs what isolated exec handlers need (DESIGN §5, docs/security.md):
# bubblewrap (bwrap), and setpriv (util-linux) with which a root server drops
# handlers to an unprivileged uid. On Debian as root it installs them from
# Debian's packages; elsewhere it says what to install and exits 0, so that
# `make tools` goes on (tests that need bwrap then fail under CI=true and skip
# otherwise).
set -euo pipefail
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
[[ ${#missing[@]} -eq 0 ]] && exit 0
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
	echo "installing ${missing[*]} (isolated exec handlers)" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 ||
		{ apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; }
	exit 0
fi
echo "install-sandbox: ${missing[*]} missing: install them (Debian: apt-get install ${missing[*]}) for isolated exec handlers, or run cairn with CAIRN_EXEC_ISOLATION=none" >&2
