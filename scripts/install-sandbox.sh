#!/usr/bin/env bash
# Installs what isolated exec handlers need (DESIGN §5, docs/security.md):
# bubblewrap (bwrap); setpriv and nsenter (util-linux), with which a root server
# drops handlers to an unprivileged uid and routes a sandbox's network; pasta
# (passt), which connects each sandbox's network namespace to the outside; and
# ip (iproute2). On Debian as root it installs them from Debian's packages, and
# makes /dev/net/tun usable by every user (udev's default, which machines
# without udev lack), so that a server not running as root can give its
# handlers a network; elsewhere it says what to install and exits 0, so that
# `make tools` goes on (tests that need them then fail under CI=true and skip
# otherwise).
set -euo pipefail
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
{ command -v setpriv && command -v nsenter; } >/dev/null 2>&1 || missing+=(util-linux)
command -v pasta >/dev/null 2>&1 || missing+=(passt)
{ command -v ip || [[ -x /usr/sbin/ip ]] || [[ -x /sbin/ip ]]; } >/dev/null 2>&1 || missing+=(iproute2)
tun() {
	if [[ $(id -u) -eq 0 && -c /dev/net/tun && $(stat -c %a /dev/net/tun) != 666 ]]; then
		echo "install-sandbox: /dev/net/tun made usable by every user (mode 0666, as udev leaves it)" >&2
		chmod 0666 /dev/net/tun
	fi
}
if [[ ${#missing[@]} -eq 0 ]]; then
	tun
	exit 0
fi
if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
	echo "installing ${missing[*]} (isolated exec handlers)" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 ||
		{ apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null; }
	tun
	exit 0
fi
echo "install-sandbox: ${missing[*]} missing: install them (Debian: apt-get install ${missing[*]}) for isolated exec handlers, or run cairn with CAIRN_EXEC_ISOLATION=none" >&2
